import pytest
import torch
import torch.nn.functional as F

from rlcore.encoders import (
    ENCODER_KINDS,
    ImageEncoder,
    SpatialKeypoints,
    check_image_shape,
    min_image_size,
    random_shift,
)
from rlcore.errors import ConfigError


def random_images(*shape: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)


@pytest.mark.parametrize("kind", ENCODER_KINDS)
def test_output_shapes_with_one_and_two_leading_dims(kind):
    torch.manual_seed(0)
    enc = ImageEncoder((3, 40, 40), kind, features=16)
    out = enc(random_images(5, 3, 40, 40))
    assert out.shape == (5, 16) and out.dtype == torch.float32
    seq = random_images(2, 4, 3, 40, 40)
    out = enc(seq)
    assert out.shape == (2, 4, 16)
    # Flattening the leading dims and restoring them keeps each sample's features.
    torch.testing.assert_close(out[1, 2], enc(seq[1, 2:3])[0])


def test_float_input_raises_and_wrong_shape_raises():
    enc = ImageEncoder((3, 36, 36), "nature", features=8)
    with pytest.raises(TypeError, match="uint8"):
        enc(torch.ones(2, 3, 36, 36))
    with pytest.raises(ValueError, match="3x36x36"):
        enc(random_images(2, 1, 36, 36))


@pytest.mark.parametrize(("kind", "unit_value"), [("nature", 1.0), ("drq", 0.5)])
def test_scaling_by_255_inside_forward(kind, unit_value):
    # 255 / 255 = 1; drq then subtracts 0.5.
    torch.manual_seed(0)
    enc = ImageEncoder((2, 36, 36), kind, features=8)
    full = torch.full((3, 2, 36, 36), 255, dtype=torch.uint8)
    by_hand = enc.trunk(enc.convs(torch.full((3, 2, 36, 36), unit_value)).flatten(1))
    torch.testing.assert_close(enc(full), by_hand)


def test_min_image_size_from_layer_specs():
    # nature: 36 -> (36 - 8) // 4 + 1 = 8 -> (8 - 4) // 2 + 1 = 3 -> (3 - 3) // 1 + 1 = 1
    # drq:    15 -> (15 - 3) // 2 + 1 = 7 -> 5 -> 3 -> 1
    assert min_image_size("nature") == 36
    assert min_image_size("drq") == 15


@pytest.mark.parametrize("kind", ENCODER_KINDS)
def test_min_image_size_runs_and_one_pixel_less_does_not(kind):
    m = min_image_size(kind)
    check_image_shape("image", (3, m, m), kind)
    enc = ImageEncoder((3, m, m), kind, features=4)
    assert enc(random_images(2, 3, m, m)).shape == (2, 4)
    with pytest.raises(RuntimeError):  # the conv stack itself rejects it
        enc.convs(torch.zeros(1, 3, m - 1, m - 1))
    for shape in [(3, m - 1, m), (3, m, m - 1)]:
        dims = "x".join(map(str, shape))
        with pytest.raises(ConfigError, match=f"obs entry 'image' is {dims}: .*{m}x{m}"):
            check_image_shape("image", shape, kind)
    with pytest.raises(ConfigError, match=f"ImageEncoder shape 3x{m - 1}x{m - 1}"):
        ImageEncoder((3, m - 1, m - 1), kind)


def test_check_image_shape_messages():
    with pytest.raises(ConfigError, match=r"'pixels' is 3x20x20: .*use encoder 'drq' or render"):
        check_image_shape("pixels", (3, 20, 20), "nature")
    with pytest.raises(ConfigError, match=r"'pixels' is 3x8x8: .*'drq'.*15x15; render larger"):
        check_image_shape("pixels", (3, 8, 8), "drq")
    with pytest.raises(ConfigError, match=r"'pixels' is \(84, 84\): .*\(C, H, W\)"):
        check_image_shape("pixels", (84, 84), "nature")
    with pytest.raises(ConfigError, match="channel-last"):
        check_image_shape("pixels", (84, 84, 3), "nature")
    with pytest.raises(ConfigError, match="allowed kinds: 'nature', 'drq'"):
        check_image_shape("pixels", (3, 84, 84), "resnet")
    with pytest.raises(ConfigError, match="'resnet'"):
        ImageEncoder((3, 84, 84), "resnet")


def test_activation_bytes_per_sample_hand_computed():
    # nature on 3x36x36, 256 features: input 3*36*36 = 3888 floats; outputs conv1 32*8*8 = 2048,
    # conv2 64*3*3 = 576, conv3 64*1*1 = 64, linear 256: 3888 + 2 * 2944 = 9776 floats.
    assert ImageEncoder((3, 36, 36), "nature").activation_bytes_per_sample() == 4 * 9776
    # drq on 1x15x15, 8 features: 225 + 2 * (32*7*7 + 32*5*5 + 32*3*3 + 32*1*1 + 8 + 8)
    #   = 225 + 2 * (1568 + 800 + 288 + 32 + 16) = 225 + 5408 = 5633 floats.
    assert ImageEncoder((1, 15, 15), "drq", features=8).activation_bytes_per_sample() == 4 * 5633


@pytest.mark.parametrize("kind", ENCODER_KINDS)
def test_gradient_reaches_first_conv(kind):
    torch.manual_seed(0)
    enc = ImageEncoder((3, 36, 36), kind, features=8)
    enc(random_images(4, 3, 36, 36)).square().sum().backward()
    grad = enc.convs[0].weight.grad
    assert grad is not None and grad.abs().sum() > 0


def matching_offsets(source: torch.Tensor, shifted: torch.Tensor, pad: int) -> list:
    """Reference loop: every (dy, dx) where the replicate-padded source, cropped, is `shifted`."""
    _, h, w = source.shape
    padded = F.pad(source[None].float(), (pad, pad, pad, pad), mode="replicate")[0]
    return [
        (dy, dx)
        for dy in range(2 * pad + 1)
        for dx in range(2 * pad + 1)
        if torch.equal(padded[:, dy : dy + h, dx : dx + w], shifted.float())
    ]


def test_random_shift_pad_zero_is_identity():
    images = random_images(3, 2, 9, 7)
    out = random_shift(images, pad=0)
    assert torch.equal(out, images) and out.data_ptr() != images.data_ptr()


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_random_shift_matches_pad_and_crop_reference(dtype):
    pad = 2
    images = random_images(16, 3, 10, 8).to(dtype)
    out = random_shift(images, pad, generator=torch.Generator().manual_seed(1))
    assert out.dtype == dtype and out.shape == images.shape
    offsets = []
    for source, shifted in zip(images, out, strict=True):
        found = matching_offsets(source, shifted, pad)
        assert found, "no crop of the padded image gives this sample"
        offsets.append(found[0])
    # Random 0-255 pixels make each crop distinct: 16 samples over 25 offsets are not all one.
    assert len(set(offsets)) > 1
    again = random_shift(images, pad, generator=torch.Generator().manual_seed(1))
    assert torch.equal(out, again)


def test_random_shift_rejects_bad_input():
    with pytest.raises(ValueError, match="B, C, H, W"):
        random_shift(random_images(3, 8, 8))
    with pytest.raises(ValueError, match="pad"):
        random_shift(random_images(1, 3, 8, 8), pad=-1)


def test_spatial_keypoints_are_where_each_map_peaks():
    """A keypoint is the softmax-weighted mean (x, y) of its map, in [-1, 1] from the left
    and top edges: a sharp peak at row 1, column 6 of a 5x9 map is at (0.5, -0.5)."""
    head = SpatialKeypoints((1, 5, 9), 2)
    with torch.no_grad():
        head.keypoints.weight.fill_(50.0)
        head.keypoints.bias.zero_()
        maps = torch.zeros(1, 1, 5, 9)
        maps[0, 0, 1, 6] = 1.0
        x, y = head(maps)[0].tolist()
    assert x == pytest.approx(0.5, abs=1e-6) and y == pytest.approx(-0.5, abs=1e-6)
    assert ImageEncoder((3, 32, 32), "spatial", 16)(
        torch.zeros(2, 3, 32, 32, dtype=torch.uint8)
    ).shape == (2, 16)


def test_fresh_spatial_keypoints_move_with_the_scene():
    """Before any training the keypoints of camera views must already differ between scenes:
    on a mostly uniform table a fresh conv's raw logits vary by ~0.05, and the softmax over
    them put every keypoint at the image centre (std ~0.001 over scenes), so the actor saw
    nothing of the camera and its gradient had nothing to grow from."""
    from rlcore.envs.push_cube_pixels import PushCubePixels

    torch.manual_seed(0)
    env = PushCubePixels(256, image_size=48)
    scenes = env.reset(seed=0)
    keypoints = ImageEncoder((3, 48, 48), "spatial", 32)(scenes["image"]).detach()
    assert keypoints.std(0).median() > 0.1
    # Some keypoint follows the goal (a large disc): |correlation| with its x above 0.5.
    goal_x = scenes["privileged"][:, 6]
    centred = (keypoints - keypoints.mean(0)) / keypoints.std(0)
    corr = (centred * ((goal_x - goal_x.mean()) / goal_x.std()).unsqueeze(1)).mean(0)
    assert corr.abs().max() > 0.5
