"""Where the study lives (`pipelines.search.storage`): the journal, a path of the
study's own, a database URL."""

from pathlib import Path

import optuna
import pytest

from pipelines.layout import Layout
from pipelines.params import parse_params
from pipelines.search.errors import SearchError
from pipelines.search.space import search_section
from pipelines.search.stage import search
from pipelines.search.storage import journal_path
from pipelines.search.study import open_study
from tests.pipelines.search.tiny_study import with_search


def test_a_sqlalchemy_url_storage_holds_the_study(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    params = parse_params(with_search(n_trials=2, pruner="none", storage=url))
    summary = search(params, Layout(tmp_path))
    assert summary["complete"] == 2
    assert len(optuna.load_study(study_name="tiny", storage=url).trials) == 2
    assert not Layout(tmp_path).search_journal.exists()


def test_a_journal_path_storage_holds_the_study_and_resumes_in_another_clone(tmp_path):
    """`search.storage: <path>`: the study's own journal file, relative to the project, which
    can be committed; a clone that has it resumes the study and runs only what it lacks."""
    first, clone = tmp_path / "first", tmp_path / "clone"
    data = with_search(n_trials=2, pruner="none", storage="search/studies/tiny.log")
    assert search(parse_params(data), Layout(first))["complete"] == 2
    journal = first / "search" / "studies" / "tiny.log"
    assert journal.exists() and not Layout(first).search_journal.exists()

    (clone / "search" / "studies").mkdir(parents=True)
    (clone / "search" / "studies" / "tiny.log").write_bytes(journal.read_bytes())
    Path(f"{clone / 'search' / 'studies' / 'tiny.log'}.lock").touch()  # a stale lock, repaired
    data["search"]["n_trials"] = 3
    summary = search(parse_params(data), Layout(clone))
    assert summary["complete"] == 3
    trials = open_study(parse_params(data), Layout(clone)).get_trials()
    assert [t.number for t in trials] == [0, 1, 2]
    assert [t.params for t in trials[:2]] == [
        t.params for t in open_study(parse_params(data), Layout(first)).get_trials()
    ]


def test_a_journal_path_outside_the_repository_needs_saying_so(tmp_path):
    project, outside = tmp_path / "project", tmp_path / "shared" / "tiny.log"
    data = with_search(storage="../shared/tiny.log")
    with pytest.raises(SearchError, match=r"outside the repository .*allow_outside_repo"):
        journal_path(search_section(parse_params(data)), Layout(project))
    assert not outside.parent.exists()
    data["search"]["allow_outside_repo"] = True
    search = search_section(parse_params(data))
    assert journal_path(search, Layout(project)) == project / "../shared/tiny.log"


def test_an_unusable_storage_url_is_one_clear_error(tmp_path):
    params = parse_params(with_search(storage="nosuchdb://user@host/db"))
    with pytest.raises(SearchError, match=r"SQLAlchemy knows no database 'nosu"):
        search(params, Layout(tmp_path))


def test_optuna_dashboard_opens_the_search_storage(tmp_path):
    """What `optuna-dashboard outputs/search/journal.log` serves, through its WSGI app."""
    import io
    import json as jsonlib
    from wsgiref.util import setup_testing_defaults

    dashboard = pytest.importorskip("optuna_dashboard")
    from optuna_dashboard._storage_url import get_storage  # what its command line calls

    params, layout = parse_params(with_search(n_trials=2, pruner="none")), Layout(tmp_path)
    search(params, layout)
    app = dashboard.wsgi(get_storage(str(layout.search_journal)))
    environ = {"PATH_INFO": "/api/studies", "wsgi.input": io.BytesIO()}
    setup_testing_defaults(environ)
    status = []
    body = b"".join(app(environ, lambda s, headers, exc_info=None: status.append(s)))
    assert status == ["200 OK"]
    studies = jsonlib.loads(body)["study_summaries"]
    assert [s["study_name"] for s in studies] == ["tiny"]
