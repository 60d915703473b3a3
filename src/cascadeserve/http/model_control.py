"""How a model repository's cascades come and go besides the first one: Triton's ``--model-control-mode``.

* ``explicit`` (``serve``'s default with ``--model-repository``): the load and unload API decide; ``--load-model
  NAME`` (repeatable, ``*`` for every folder) loads some at start.
* ``none``: every folder is loaded at start, and the load and unload API are refused (the set is fixed).
* ``poll``: every folder is loaded at start, and the repository is scanned every ``poll_s`` seconds: a new folder is
  loaded, a removed one unloaded, and one whose files changed reloaded (the new cascade takes the requests, the old
  one finishes what it admitted); the load and unload API are refused, as Triton refuses them while polling.

Its own loads take ``parameters`` (``serve --emulate``: ``{"emulate": true}``, every folder answering from its
profile's records). Start-up loads happen before the server is ready; a folder that fails to load is logged with why
and skipped (the others load), and while polling it is tried again once its files change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from cascadeserve.http.repository import Repository, RepositoryError

__all__ = ["MODES", "ModelControl"]

MODES = ("none", "explicit", "poll")
Mode = Literal["none", "explicit", "poll"]
_log = logging.getLogger("cascadeserve.repository")


@dataclass
class ModelControl:
    """A repository's model control (module docstring). ``names`` lists the repository's folders; ``signature``
    gives a folder's fingerprint (its files' names, sizes and modification times), compared between polls."""

    mode: Mode
    names: Callable[[], list[str]]
    signature: Callable[[str], str]
    startup: Sequence[str] = ()  # explicit mode: the folders --load-model names ("*": all)
    poll_s: float = 15.0
    parameters: Mapping[str, Any] = field(default_factory=dict)  # of its own loads (serve --emulate: emulated)
    log: Callable[[str], None] = _log.warning
    _seen: dict[str, str] = field(init=False, default_factory=dict)  # each folder's signature when last tried
    _task: asyncio.Task[None] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"--model-control-mode: {self.mode!r} is not one of {', '.join(MODES)}")
        if self.startup and self.mode != "explicit":
            raise ValueError("--load-model: only with --model-control-mode explicit (the others load every folder)")
        if not self.poll_s > 0:
            raise ValueError(f"--repository-poll-s: {self.poll_s} must be above 0")

    def check_api(self, action: str) -> None:
        """Raise :class:`RepositoryError` (403) when the mode refuses the API's ``action`` (load or unload)."""
        if self.mode == "none":
            raise RepositoryError(f"explicit model {action} is not allowed: --model-control-mode none", 403)
        if self.mode == "poll":
            raise RepositoryError(
                f"explicit model {action} is not allowed while polling (--model-control-mode poll): change the "
                "repository's folders instead",
                403,
            )

    async def start(self, repo: Repository) -> None:
        """Load what the mode loads at start; in ``poll`` mode, start polling."""
        everything = self.mode != "explicit" or "*" in self.startup
        scan = await asyncio.to_thread(self._scan, None if everything else list(self.startup))
        for name, sig in scan.items():
            await self._load(repo, name, sig)
        if self.mode == "poll":
            self._task = asyncio.create_task(self._poll(repo), name="cascadeserve-repository-poll")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _scan(self, only: list[str] | None = None) -> dict[str, str]:
        """Each folder's signature (read on a worker thread: a large profile folder is many files)."""
        out = {}
        for name in self.names() if only is None else only:
            try:
                out[name] = self.signature(name)
            except OSError:  # removed while reading: the next poll sees it gone
                out[name] = ""
        return out

    async def _load(self, repo: Repository, name: str, signature: str) -> None:
        self._seen[name] = signature
        try:
            await repo.load(name, dict(self.parameters), internal=True)
        except RepositoryError as e:
            self.log(f"model {name!r} not loaded: {e.message}")
        else:
            self.log(f"loaded model {name!r} from the model repository")

    async def poll_once(self, repo: Repository) -> None:
        """One scan: load new folders, unload removed ones, reload changed ones."""
        scan = await asyncio.to_thread(self._scan)
        for name, sig in sorted(scan.items()):
            if self._seen.get(name) != sig:
                await self._load(repo, name, sig)  # new, changed, or failed before and changed since: a (re)load
        for name in sorted(set(self._seen) - set(scan)):
            del self._seen[name]
            if repo.app(name) is not None:
                try:
                    await repo.unload(name, internal=True)
                    self.log(f"unloaded model {name!r}: its folder left the model repository")
                except RepositoryError as e:
                    self.log(f"model {name!r} not unloaded: {e.message}")

    async def _poll(self, repo: Repository) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            try:
                await self.poll_once(repo)
            except Exception as e:  # a scan that fails (a folder unreadable) must not end polling
                self.log(f"polling the model repository failed: {type(e).__name__}: {e}")
