"""Greedy-policy evaluation: all episodes step together, one batched forward per step; and a video
of one greedy episode (MP4 where an encoder is installed, else GIF)."""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hetrl.envs import AtariOptions, EnvSource, make_env
from hetrl.files import atomic_path

EVAL_SEED_OFFSET = 1_000_003  # evaluation episodes never share seeds with training envs


def evaluate_policy(
    policy: Callable[[np.ndarray], np.ndarray], env: str | EnvSource, episodes: int, seed: int,
    atari: AtariOptions | None = None, seed_offset: int = EVAL_SEED_OFFSET,
    should_stop: Callable[[], bool] | None = None,
) -> np.ndarray:
    """Returns of ``episodes`` episodes; env i is reset with ``seed + seed_offset + i`` (by default
    ``EVAL_SEED_OFFSET``: the test episodes; ``hetrl exits sweep`` plays validation episodes of
    another offset). The
    envs are made for evaluation (``training=False``): an Atari env plays full games (no life loss
    as terminal) and returns raw scores; observations keep their dtype (uint8 for pixels).
    ``should_stop`` (asked before each step of the envs): once true, play stops and only the
    episodes that ended are returned (fewer than ``episodes``): an untrained Atari policy's games
    can run for minutes, and a stop signal should not wait for them."""
    envs = [make_env(env, training=False, atari=atari) for _ in range(episodes)]
    first = np.stack([made.reset(seed=seed + seed_offset + i)[0] for i, made in enumerate(envs)])
    obs = first if first.dtype == np.uint8 else first.astype(np.float32)
    returns = np.zeros(episodes)
    active = np.ones(episodes, dtype=bool)
    discrete = hasattr(envs[0].action_space, "n")
    while active.any():
        if should_stop is not None and should_stop():
            break
        idx = np.flatnonzero(active)
        actions = policy(obs[idx])
        for j, i in enumerate(idx):
            o, r, term, trunc, _ = envs[i].step(int(actions[j]) if discrete else actions[j])
            returns[i] += r
            obs[i] = o
            if term or trunc:
                active[i] = False
    for made in envs:
        made.close()
    return returns[~active]


# SDL (pygame, which classic-control envs draw with) starts a video and an audio driver when an env
# first renders, and complains on stderr ("error: XDG_RUNTIME_DIR is invalid or not set") on a
# machine without a desktop session; rgb_array frames need neither.
_QUIET_SDL = {"SDL_VIDEODRIVER": "dummy", "SDL_AUDIODRIVER": "dummy", "PYGAME_HIDE_SUPPORT_PROMPT": "1"}


@contextmanager
def quiet_sdl() -> Iterator[None]:
    """SDL's dummy drivers while an env renders off screen (unless the caller's environment names
    others); the previous environment is restored afterwards, so a later window still opens."""
    added = {k: v for k, v in _QUIET_SDL.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def mp4_encoder() -> str | None:
    """The ffmpeg that MP4s are written with (imageio-ffmpeg's own binary, or the one
    IMAGEIO_FFMPEG_EXE names), or None where there is none: videos are then GIFs."""
    try:
        import imageio_ffmpeg
    except ImportError:
        return None
    try:
        return imageio_ffmpeg.get_ffmpeg_exe()
    except RuntimeError:  # no binary for this platform and none on the PATH
        return None


@dataclass
class Video:
    path: Path
    format: str  # "mp4" or "gif"
    episode_return: float
    note: str = ""  # why a GIF where an MP4 was not possible


def record_video(policy: Callable[[np.ndarray], np.ndarray], env_id: str | EnvSource, stem: Path, seed: int,
                 atari: AtariOptions | None = None, fps: int | None = None) -> Video:
    """Run one greedy episode (seed ``seed + EVAL_SEED_OFFSET``) with ``rgb_array`` rendering and
    save it as ``stem.mp4`` (H.264, where an encoder is present: :func:`mp4_encoder`) or else
    ``stem.gif``. ``fps``: the env's ``render_fps`` by default. Written atomically."""
    encoder = mp4_encoder()
    kind = "mp4" if encoder else "gif"
    path = stem.with_name(f"{stem.name}.{kind}")
    with quiet_sdl():
        env = make_env(env_id, render_mode="rgb_array", training=False, atari=atari)
        try:
            fps = fps or int(env.metadata.get("render_fps") or 30)
            frames = _greedy_frames(policy, env, seed)
            with atomic_path(path) as tmp:
                total = _write_mp4(frames, tmp, fps) if encoder else _write_gif(frames, tmp, fps)
        finally:
            env.close()
    note = "" if encoder else "no MP4 encoder is installed: pip install 'hetrl[video]' for MP4"
    return Video(path, kind, total, note)


Frames = Generator[np.ndarray, None, float]  # an episode's frames, then its return (StopIteration.value)


def _greedy_frames(policy: Callable[[np.ndarray], np.ndarray], env: Any, seed: int) -> Frames:
    """The frames of one greedy episode, then its return."""
    obs, _ = env.reset(seed=seed + EVAL_SEED_OFFSET)
    yield env.render()
    total, done = 0.0, False
    discrete = hasattr(env.action_space, "n")
    while not done:
        obs = np.asarray(obs)
        action = policy((obs if obs.dtype == np.uint8 else obs.astype(np.float32))[None])[0]
        obs, reward, term, trunc, _ = env.step(int(action) if discrete else action)
        total += float(reward)
        done = term or trunc
        yield env.render()
    return total


def _write_gif(frames: Frames, path: Path, fps: int) -> float:
    from PIL import Image

    images, total = [], 0.0
    try:
        while True:
            images.append(Image.fromarray(next(frames)))
    except StopIteration as end:
        total = end.value
    images[0].save(path, format="GIF", save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)
    return total


def _write_mp4(frames: Frames, path: Path, fps: int) -> float:
    """H.264 in yuv420p (what browsers and players take), frames padded to even sizes; ffmpeg says
    nothing unless it fails."""
    import imageio_ffmpeg

    first = next(frames)
    height, width = first.shape[:2]
    pad = ((0, height % 2), (0, width % 2), (0, 0)) if height % 2 or width % 2 else None
    writer = imageio_ffmpeg.write_frames(str(path), (width + width % 2, height + height % 2), fps=fps, codec="libx264",
                                         pix_fmt_out="yuv420p", macro_block_size=1, ffmpeg_log_level="error",
                                         output_params=["-f", "mp4"])  # the path may end in .tmp
    writer.send(None)  # start ffmpeg
    total = 0.0
    try:
        frame = first
        while True:
            writer.send(np.ascontiguousarray(frame if pad is None else np.pad(frame, pad)))
            frame = next(frames)
    except StopIteration as end:
        total = end.value
    finally:
        writer.close()
    return total
