"""A server that owns its process (``Server.run``, what ``cascadeserve serve`` runs) freezes what it loaded out of
the garbage collector's passes once it listens; one on a thread (tests, benchmarks, the demo) leaves its host
process's collector alone."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.http.http_helpers import toy_plan

from cascadeserve.http import Server, ServerOptions, build_app
from cascadeserve.profile import Profile

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import gc
    from tests.conftest import make_toy_profile
    from tests.http.http_helpers import toy_plan
    from cascadeserve.http import Server, ServerOptions, build_app

    prof = make_toy_profile()
    app = build_app(prof, toy_plan(prof), emulate=True, server_options=ServerOptions(stop_grace_s=1.0))
    server = Server(app, "127.0.0.1", 0, grace_s=1.0)
    print("before", gc.get_freeze_count(), flush=True)

    def listening():
        print("listening", gc.get_freeze_count(), flush=True)
        server.server.should_exit = True

    server.server.on_listening = listening
    server.run()
    """
)


def test_a_server_that_owns_its_process_freezes_what_it_loaded() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300, check=True
    ).stdout.split()
    assert out[0] == "before" and int(out[1]) == 0
    assert out[2] == "listening" and int(out[3]) > 10_000  # the models, the profile, the code: all frozen


def test_a_server_on_a_thread_leaves_the_collector_alone(toy_profile: Profile) -> None:
    before = gc.get_freeze_count()
    app = build_app(toy_profile, toy_plan(toy_profile), emulate=True, server_options=ServerOptions(stop_grace_s=1.0))
    server = Server(app, "127.0.0.1", 0, grace_s=1.0).start()
    server.stop()
    assert gc.get_freeze_count() == before
