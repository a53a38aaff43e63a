"""StreamReplayBuffer of a frame-stacked env: one frame stored per row, the stacks rebuilt at
sample time exactly as the env showed them, never with a frame of another episode."""

import pytest
import torch

from rlcore.collector import SyncCollector
from rlcore.envs import FrameStack, PushCubePixels
from rlcore.envs.gym_bridge import GymnasiumEnv
from rlcore.observations import ObsEntry
from rlcore.policies import UniformRandomPolicy
from rlcore.replay import NEXT_OBS
from rlcore.rollout import (
    ACTION,
    FINAL_OBS,
    MASK,
    OBS,
    REWARD,
    TERMINATED,
    TRUNCATED,
    RolloutSpec,
    make_rollout,
)
from rlcore.stream_replay import StreamReplayBuffer
from tests.rlcore.envs.flipbook import Flipbook, frame_ids
from tests.rlcore.envs.gym_test_envs import register

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
register()


def flipbook(device="cpu"):
    return FrameStack(Flipbook(3, device=device), 4)  # terminations and truncations


def pixels(device="cpu"):
    env = FrameStack(PushCubePixels(3, device=device, image_size=8), 3)
    env.set_max_episode_steps(5)
    return env


def pixel_point(autoreset):
    """Noise frames (each differs), terminating 1 step in 5, truncated after 5 steps."""
    return lambda device="cpu": FrameStack(
        GymnasiumEnv("rlcore-test/PixelPoint-v0", 3, autoreset=autoreset), 2
    )


ENVS = {
    "flipbook": flipbook,
    "push_cube_pixels": pixels,
    "gymnasium next-step": pixel_point("next-step"),
    "gymnasium same-step": pixel_point("same-step"),
}


class Recorded:
    """A collector filling a buffer, and every valid transition it made, keyed by its
    (continuous random) action: the stacks the env showed as obs, and as next obs its true
    successor (the final stack where the episode ended; None where it terminated)."""

    def __init__(self, env, capacity, steps, seed=0):
        self.env = env
        self.rollout = make_rollout(
            RolloutSpec.for_env(env, steps, with_value=False, with_final_obs=True)
        )
        gen = torch.Generator(device=env.device).manual_seed(seed)
        policy = UniformRandomPolicy(env.action_space).to(env.device)
        self.collector = SyncCollector(env, policy, self.rollout, gen)
        self.collector.reset(seed=seed)
        self.buffer = StreamReplayBuffer.for_env(env, capacity, gen)
        self.reference, self.order = {}, []

    def collect(self, count, reset_at=None):
        for i in range(count):
            if i == reset_at:
                self.collector.reset(seed=1)
            self.collector.collect()
            self.buffer.add_rollout(self.rollout)
            self.record()

    def record(self):
        ro = self.rollout.cpu()
        for t in range(ro.batch_size[1] - 1):
            for n in range(ro.batch_size[0]):
                step = ro[n, t]
                if MASK in ro and not step[MASK]:
                    continue
                ended = bool(step[TRUNCATED] | step[TERMINATED])
                following = ro[FINAL_OBS][n, t] if ended else ro[OBS][n, t + 1]
                key = tuple(step[ACTION].tolist())
                self.reference[key] = {
                    "obs": step[OBS].clone(),
                    "next": None if step[TERMINATED] else following.clone(),
                    "reward": step[REWARD].item(),
                    "flags": (bool(step[TERMINATED]), bool(step[TRUNCATED])),
                }
                self.order.append(key)

    def check(self, batch):
        """Every transition of `batch` is the recorded one its action names, stacks included."""
        batch = batch.cpu()
        for i in range(batch.batch_size[0]):
            ref = self.reference[tuple(batch[ACTION][i].tolist())]
            assert batch[REWARD][i].item() == ref["reward"]
            assert (bool(batch[TERMINATED][i]), bool(batch[TRUNCATED][i])) == ref["flags"]
            for key, value in batch[OBS].items():
                assert torch.equal(value[i], ref["obs"][key]), key
                if ref["next"] is not None:
                    assert torch.equal(batch[NEXT_OBS, key][i], ref["next"][key]), key


def stored(buffer):
    return torch.cat(list(buffer.chunks(7)))


@pytest.mark.parametrize(
    ("steps", "rollouts", "reset_at"),
    [(4, 7, None), (4, 7, 5), (12, 3, None)],
    ids=["wrapping", "collector-reset-between-rollouts", "rollouts-longer-than-the-ring"],
)
@pytest.mark.parametrize("name", list(ENVS))
def test_sampled_stacks_are_the_ones_the_env_showed(name, steps, rollouts, reset_at):
    """30 transitions (10 rows of 3 envs) from 7 rollouts of 4 steps: the ring wraps twice
    and its oldest rows read their stacks' history from the rows kept before them. A
    collector reset starts a rollout from first frames; a rollout longer than the ring keeps
    its last rows, their history taken from the stack of its first kept row."""
    run = Recorded(ENVS[name](), capacity=30, steps=steps)
    run.collect(rollouts, reset_at)
    buffer = run.buffer
    everything = stored(buffer)
    assert len(buffer) == everything.batch_size[0] > 0
    assert [tuple(a.tolist()) for a in everything[ACTION]] == run.order[-len(buffer) :]
    run.check(everything)
    run.check(buffer.sample(256))
    flags = [run.reference[key]["flags"] for key in run.order[-len(buffer) :]]
    assert any(truncated and not terminated for terminated, truncated in flags)
    channels = run.env.env.obs_spec["image"].shape[0]  # one frame per row, finals included
    assert buffer.storage[OBS, "image"].shape[2] == buffer.finals["image"].shape[1] == channels
    run.env.close()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("copy_final_rows", [True, False], ids=["cpu-gather", "device-select"])
def test_no_stack_holds_a_frame_of_another_episode(device, copy_final_rows):
    """Flipbook's frames name their episode and step: every rebuilt stack is one episode's
    consecutive frames, its first repeated where the episode is younger than the stack."""
    run = Recorded(flipbook(device), capacity=60, steps=5)
    run.buffer._copy_final_rows = copy_final_rows  # the accelerators' path, on the CPU
    run.collect(9)
    batch = run.buffer.sample(512)
    run.check(batch)
    young = 0
    for key in (OBS, NEXT_OBS):
        for i, stack in enumerate(frame_ids(batch[key, "image"].cpu())):
            if key == NEXT_OBS and batch[TERMINATED][i]:
                continue  # the next episode's first frames: any finite stack would do
            episodes, steps = zip(*stack, strict=True)
            assert len(set(episodes)) == 1, stack
            first = steps.count(steps[0])
            assert steps[first - 1 :] == tuple(range(steps[0], steps[0] + 4 - first + 1))
            assert first == 1 or steps[0] == 0, stack  # only an episode's first repeats
            young += first > 1
    assert young > 50  # episodes of at most 6 steps: many stacks are padded
    terminated, truncated = batch[TERMINATED], batch[TRUNCATED] & ~batch[TERMINATED]
    assert terminated.any() and truncated.any()


def test_a_stacked_state_round_trips_and_both_buffers_continue_alike():
    run = Recorded(flipbook(), capacity=30, steps=4)
    run.collect(6)
    state = run.buffer.state_dict()
    assert state["storage"]["obs/image"].shape == (10 + 1 + 3, 3, 3, 2, 2)  # history, pending
    assert state["storage"]["age"].shape == (14, 3)
    twin = StreamReplayBuffer.for_env(run.env, 30, torch.Generator().manual_seed(7))
    twin.load_state_dict(state)
    for _ in range(2):
        twin.generator.set_state(run.buffer.generator.get_state())
        a, b = twin.sample(64), run.buffer.sample(64)
        assert (a == b).all()
        assert (stored(twin) == stored(run.buffer)).all()
        run.collect(1)
        twin.add_rollout(run.rollout)
    run.check(stored(twin))


def test_four_stacked_frames_take_the_bytes_of_one():
    """3 x 64 x 64 frames, 4 stacked: bytes per stored transition within 1.1 x one frame's
    observation plus the scalars, as without stacking."""
    proprio = ObsEntry((4,), torch.float32)
    sizes = {}
    for frames in (1, 4):
        spec = {"image": ObsEntry((3 * frames, 64, 64), torch.uint8), "proprio": proprio}
        buffer = StreamReplayBuffer(
            2048, spec, (2,), torch.float32, "cpu", torch.Generator(),
            num_envs=8, with_success=True, max_episode_steps=100, frame_stack=frames,
        )  # fmt: skip
        sizes[frames] = buffer.nominal_bytes / buffer.capacity
    raw = 3 * 64 * 64 + 4 * 4 + 4 * 2 + 4 + 1 + 1 + 1  # one frame, proprio and the scalars
    assert sizes[1] <= 1.1 * raw and sizes[4] <= 1.1 * raw
    assert sizes[4] / sizes[1] < 1.02  # the age byte and 3 rows of history in 257


def test_a_spec_that_does_not_stack_is_refused():
    spec = {"image": ObsEntry((4, 8, 8), torch.uint8)}
    with pytest.raises(ValueError, match=r"obs entry 'image' \(uint8 \[4, 8, 8\]\) is no stack"):
        StreamReplayBuffer(8, spec, (1,), torch.float32, "cpu", None, num_envs=2, frame_stack=3)
    with pytest.raises(ValueError, match="3 stacked frames, but no image entry in state float32"):
        StreamReplayBuffer(8, 4, (1,), torch.float32, "cpu", None, num_envs=2, frame_stack=3)
