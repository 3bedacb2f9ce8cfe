"""``scoretune train --ray``: the environment workers as Ray actors, anywhere in a Ray cluster.

SB3's SubprocVecEnv runs each environment in a subprocess that answers commands (``step``,
``reset``, ...) over a pipe. Here each environment lives in a Ray actor that runs **SB3's own
worker loop** (``subproc_vec_env._worker``) on a pipe inside the actor, and the vectorised side is
SubprocVecEnv itself with each pipe replaced by a call to its actor. So every command means what it
means in SubprocVecEnv, and training with the same seed gives the same policy on either.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
from collections.abc import Callable
from typing import Any

import gymnasium as gym
from stable_baselines3.common.vec_env import SubprocVecEnv
from stable_baselines3.common.vec_env.base_vec_env import CloudpickleWrapper, VecEnv

from agent.compute import LOCAL_RAY, connect_ray
from agent.errors import AgentError


class EnvActor:
    """One environment in a Ray actor, driven by SB3's SubprocVecEnv worker loop on a local pipe."""

    def __init__(self, env_fn: Callable[[], gym.Env]) -> None:
        from stable_baselines3.common.vec_env.subproc_vec_env import _worker

        self.conn, child = mp.Pipe()
        spare, _ = mp.Pipe()  # the worker closes its "parent" end first: give it one of its own
        self.thread = threading.Thread(target=_worker, args=(child, spare, CloudpickleWrapper(env_fn)), daemon=True)
        self.thread.start()

    def call(self, cmd: str, data: Any) -> Any:
        self.conn.send((cmd, data))
        if cmd == "close":  # the worker closes without an answer
            self.thread.join(timeout=10)
            return None
        return self.conn.recv()


class _ActorPipe:
    """The parent end of a SubprocVecEnv pipe, as calls to an :class:`EnvActor`."""

    def __init__(self, ray: Any, actor: Any, index: int) -> None:
        self.ray = ray
        self.actor = actor
        self.index = index
        self.pending: Any = None

    def send(self, message: tuple[str, Any]) -> None:
        self.pending = self.actor.call.remote(*message)

    def recv(self) -> Any:
        pending, self.pending = self.pending, None
        try:
            return self.ray.get(pending)
        except self.ray.exceptions.RayActorError:
            raise AgentError(f"the Ray worker of environment {self.index} was lost mid-episode; rerun training "
                             "(its checkpoints are kept)") from None

    def close(self) -> None:
        return None


class RayVecEnv(SubprocVecEnv):
    """SubprocVecEnv with Ray actors for processes (``address``: ``auto`` or a cluster address)."""

    def __init__(self, env_fns: list[Callable[[], gym.Env]], address: str = LOCAL_RAY) -> None:
        ray = connect_ray(address, num_cpus=len(env_fns) if address == LOCAL_RAY else None)
        actor = ray.remote(num_cpus=1)(EnvActor)
        self.ray = ray
        self.actors = [actor.remote(fn) for fn in env_fns]
        self.remotes = [_ActorPipe(ray, a, i) for i, a in enumerate(self.actors)]
        self.work_remotes = ()
        self.processes = []
        self.waiting = False
        self.closed = False
        self.remotes[0].send(("get_spaces", None))
        observation_space, action_space = self.remotes[0].recv()
        VecEnv.__init__(self, len(env_fns), observation_space, action_space)

    def close(self) -> None:
        if self.closed:
            return
        try:
            super().close()
            for remote in self.remotes:  # SubprocVecEnv sends close without waiting: wait here
                if remote.pending is not None:
                    remote.recv()
        finally:
            for a in self.actors:
                self.ray.kill(a)
