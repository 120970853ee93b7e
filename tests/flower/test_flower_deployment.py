"""examples/flower/ on Flower's Deployment Engine: a SuperLink and two SuperNodes started as
real processes on 127.0.0.1 (insecure), ``flwr run`` of the example App, 2 rounds of FedAvg;
the processes are stopped (by their own pids) whatever happens. Slow: each ClientApp message
runs in a fresh ``flwr-clientapp`` process that imports JAX (~20 s each here)."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from helpers import skip_module_without  # noqa: E402

skip_module_without("flwr", "flwr_datasets", "sklearn")

pytestmark = pytest.mark.slow
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "flower")
BIN = os.path.dirname(sys.executable)
DEADLINE = 1200  # seconds for the whole run (2 rounds took ~8 min on this loaded machine)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_flwr_run_against_superlink_and_two_supernodes(tmp_path):
    home = tmp_path / "flwr-home"
    home.mkdir()
    link = _free_port()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "local"\n\n[superlink.local]\n'
        f'address = "127.0.0.1:{link}"\ninsecure = true\n')
    env = dict(os.environ, FLWR_HOME=str(home),
               PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    app = tmp_path / "app"
    shutil.copytree(EXAMPLE, app, ignore=shutil.ignore_patterns("__pycache__"))
    result = tmp_path / "result.json"
    procs = []

    def start(args, log):
        # each in its own process group: a SuperNode / SuperLink starts flower-superexec
        # and flwr-clientapp / flwr-serverapp children, stopped with it below
        procs.append(subprocess.Popen([os.path.join(BIN, args[0])] + args[1:], env=env,
                                      stdout=open(tmp_path / log, "w"),
                                      stderr=subprocess.STDOUT, start_new_session=True))

    try:
        start(["flower-superlink", "--insecure", "--host", "127.0.0.1", "--port", str(link),
               "--disable-runtime-dependency-installation"], "superlink.log")
        for i in range(2):
            start(["flower-supernode", "--insecure", "--superlink", f"127.0.0.1:{link}",
                   "--port", str(_free_port()),
                   "--node-config", f"partition-id={i} num-partitions=2"], f"node{i}.log")
        end = time.time() + DEADLINE
        while True:  # flwr run returns once the run is submitted; retry until the link is up
            run = subprocess.run([os.path.join(BIN, "flwr"), "run", str(app), "local",
                                  "--run-config", f'result-path="{result}"'],
                                 env=env, capture_output=True, text=True, timeout=120)
            if run.returncode == 0 or time.time() > end - DEADLINE + 60:
                break
            time.sleep(2)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        while not result.exists() and time.time() < end:
            assert all(p.poll() is None for p in procs), "a Flower process died"
            time.sleep(2)
        assert result.exists(), (tmp_path / "superlink.log").read_text()[-3000:]
        out = json.loads(result.read_text())
        assert out["rounds"] == [1, 2] and out["nodes"] == 2
        for b in out["bytes"].values():
            assert b["nodes"] == 2 and b["sent"] == b["received"] > 0
        assert all(0.0 <= a <= 1.0 for a in out["accuracy"].values())
    finally:
        for p in procs:
            _signal_group(p, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                _signal_group(p, signal.SIGKILL)
                p.wait()
        time.sleep(2)
        for p in procs:  # children that outlived their parent (flower-superexec)
            _signal_group(p, signal.SIGKILL)
    assert all(p.poll() is not None for p in procs)


def _signal_group(proc, sig):
    """Signal the process group this test started ``proc`` in (its pid is the group id)."""
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
