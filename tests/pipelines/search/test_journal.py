import os
from pathlib import Path

import pytest
from optuna.study import StudyDirection

from pipelines.search.journal import journal_storage, recover_journal


def test_a_clean_journal_is_left_alone(tmp_path):
    journal = tmp_path / "journal.log"
    journal.write_bytes(b'{"op_code":0}\n{"op_code":1}\n')
    assert recover_journal(journal) == []
    assert journal.read_bytes() == b'{"op_code":0}\n{"op_code":1}\n'
    assert recover_journal(tmp_path / "missing.log") == []


def test_a_torn_last_write_is_dropped_to_the_last_complete_line(tmp_path):
    journal = tmp_path / "journal.log"
    journal.write_bytes(b'{"op_code":0}\n' + b"x" * 5000)
    (repair,) = recover_journal(journal)
    assert "(5000 bytes)" in repair
    assert journal.read_bytes() == b'{"op_code":0}\n'


def test_a_journal_with_no_complete_line_is_emptied(tmp_path):
    journal = tmp_path / "journal.log"
    journal.write_bytes(b'{"op_co')
    assert len(recover_journal(journal)) == 1
    assert journal.read_bytes() == b""


def test_stale_locks_of_either_kind_are_removed(tmp_path):
    journal = tmp_path / "journal.log"
    journal.write_bytes(b"")
    lock = tmp_path / "journal.log.lock"
    os.symlink("elsewhere/journal.log", lock)  # the dangling link Optuna's default lock left
    assert recover_journal(journal) == [f"removed the lock {lock} left by a stopped worker"]
    assert not lock.is_symlink()
    lock.touch()
    assert len(recover_journal(journal)) == 1 and not lock.exists()


def test_the_storage_locks_with_a_plain_file_at_an_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    storage = journal_storage(Path("sub/journal.log"))
    lock = storage._backend._lock
    assert os.path.isabs(lock._lock_file) and lock._lock_file.endswith("journal.log.lock")
    assert type(lock).__name__ == "JournalFileOpenLock"
    storage.create_new_study([StudyDirection.MAXIMIZE], "s")  # takes the lock, then releases it
    assert not (tmp_path / "sub" / "journal.log.lock").exists()


def test_a_file_that_is_not_a_journal_is_never_trimmed_nor_appended_to(tmp_path):
    from pipelines.files import OutputError

    cases = {
        "params.yaml": b"name: x\nseeds: [0]\nno newline at the end",
        "secret.txt": b"token=abc",
        "data.json": b'{"a": 1}\n',
    }
    for name, content in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        for open_it in (recover_journal, journal_storage):
            with pytest.raises(OutputError, match="is not an Optuna journal"):
                open_it(path)
        assert path.read_bytes() == content
    (tmp_path / "folder").mkdir()
    with pytest.raises(OutputError, match="is not a regular file"):
        journal_storage(tmp_path / "folder")
    (tmp_path / "link").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(OutputError, match="is not a regular file"):
        recover_journal(tmp_path / "link")
    assert not list(tmp_path.glob("*.lock"))
