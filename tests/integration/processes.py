"""processes.py — the daemons under test (build/outbox-relay,
build/outbox-consume) as child processes.

  Process         any daemon under test: stderr to a log file, bounded
                  waits on log lines and exit, peak RSS.
  ProcessFactory  one Process per call, all SIGKILLed at cleanup.
  tuned / TUNINGS every central scenario once with tuning flags and once
                  with none (the defaults users run).

Every Process's log is kept so conftest.py can fail a test whose programs
reported a sanitizer finding (process_logs_since, sanitizer_findings).
Every daemon gets the test's plugin (harness_base.current_plugin) as
OUTBOX_RELAY_PLUGIN. harness.py re-exports every name.
"""

import os
import re
import signal
import subprocess
import time

import harness_base
from harness_base import _die_with_parent, _register, _unregister

# Sanitizer findings in a program's output: ASan, LSan (leaks at exit) and
# UBSan. Each Process's log is scanned when the test ends (conftest.py).
SANITIZER_REPORT = re.compile(r"ERROR: (AddressSanitizer|LeakSanitizer)|runtime error: ")
_process_logs = []


def process_logs_since(n):
    """Logs of the Processes started after the first n (see process_log_count)."""
    return _process_logs[n:]


def process_log_count():
    return len(_process_logs)


def sanitizer_findings(log_path):
    """The first sanitizer report in a log (with some lines after it), or None."""
    try:
        with open(log_path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    m = SANITIZER_REPORT.search(text)
    if m is None:
        return None
    start = text.rfind("\n", 0, m.start()) + 1
    return text[start:start + 4000]


# --------------------------------------------------------------------------
# Tuned and default runs (issue 11: every binary runs each scenario at least
# once with no tuning flag; defaults are what users run)
# --------------------------------------------------------------------------

TUNINGS = ("tuned", "defaults")


def tuned(tuning, *flags):
    """`flags` for tuning "tuned", nothing at all for "defaults". Use with
    @pytest.mark.parametrize("tuning", harness.TUNINGS) on a suite's
    central scenarios; a "defaults" run must wait on conditions with
    deadlines that allow for the defaults (--status-interval 10 s: the
    slot's confirmed_flush_lsn may lag that long)."""
    assert tuning in TUNINGS, tuning
    return list(flags) if tuning == "tuned" else []


DEFAULT_STATUS_INTERVAL = 10    # s, outbox-relay's --status-interval default


def confirm_timeout(tuning, seconds):
    """A deadline for the slot to confirm something: `seconds` as tuned;
    with the defaults two more status intervals (an update may have just
    gone out when the delivery report arrives)."""
    return seconds if tuning == "tuned" else seconds + 2 * DEFAULT_STATUS_INTERVAL


# --------------------------------------------------------------------------
# Daemon under test
# --------------------------------------------------------------------------

class Process:
    """A daemon with stderr (and stdout) captured to a log file.

    env: extra environment; OUTBOX_RELAY_* variables of the calling
    environment are removed first so tests never inherit configuration
    (apart from the test's plugin, see current_plugin).
    """

    def __init__(self, argv, log_path, env=None, cwd=None):
        self.argv = list(argv)
        self.log_path = log_path
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_RELAY_")}
        if harness_base.current_plugin is not None:
            full_env["OUTBOX_RELAY_PLUGIN"] = harness_base.current_plugin
        full_env.update(env or {})
        if harness_base.current_names is not None:  # the shared real Kafka: real_broker.py
            argv, full_env = harness_base.current_names.rewrite(list(argv), full_env)
            self.argv = list(argv)
        self._log = open(log_path, "wb")
        _process_logs.append(log_path)
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, env=full_env, cwd=cwd,
                                     preexec_fn=_die_with_parent)
        self.pid = self.proc.pid
        self.returncode = None
        self._maxrss_kb = None
        self._last_hwm = None
        self._log_offset = 0
        _register(self)

    # -- state -------------------------------------------------------------

    def _reap(self, block_timeout=0.0):
        """Collects the exit status (and ru_maxrss) with wait4; True if the
        process has exited."""
        if self.returncode is not None:
            return True
        deadline = time.monotonic() + block_timeout
        while True:
            try:
                pid, status, ru = os.wait4(self.pid, os.WNOHANG)
            except ChildProcessError:
                # Somebody else reaped it (should not happen); fall back.
                self.returncode = self.proc.poll()
                return True
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
                self.proc.returncode = self.returncode
                self._maxrss_kb = ru.ru_maxrss
                self._log.close()
                _unregister(self)
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)

    def running(self):
        return not self._reap()

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_tail(self, n=40):
        return "\n".join(self.log_text().splitlines()[-n:])

    # -- waits -------------------------------------------------------------

    def wait_for_log(self, pattern, timeout=30, since_mark=False, flags=re.IGNORECASE):
        """Waits until the log matches the regex `pattern` (case-insensitive
        by default); returns the match. Fails early if the process exits
        without producing it. since_mark: only text after the last mark()."""
        rx = re.compile(pattern, flags)
        deadline = time.monotonic() + timeout
        while True:
            text = self.log_text()
            if since_mark:
                text = text[self._log_offset:]
            m = rx.search(text)
            if m:
                return m
            exited = not self.running()
            if exited:
                text = self.log_text()[self._log_offset if since_mark else 0:]
                m = rx.search(text)
                if m:
                    return m
                raise AssertionError("process exited (rc=%s) without logging /%s/; log tail:\n%s"
                                     % (self.returncode, pattern, self.log_tail()))
            if time.monotonic() >= deadline:
                raise AssertionError("no /%s/ in the log within %.1fs; log tail:\n%s"
                                     % (pattern, timeout, self.log_tail()))
            time.sleep(0.1)

    def mark(self):
        """Remembers the current end of the log for wait_for_log(since_mark=True)."""
        self._log_offset = len(self.log_text())

    def wait_exit(self, timeout=30):
        """Waits for exit; returns the exit code (negative = signal)."""
        if not self._reap(timeout):
            raise AssertionError("process %d still running after %.1fs; log tail:\n%s"
                                 % (self.pid, timeout, self.log_tail()))
        return self.returncode

    def assert_running_for(self, seconds):
        """Fails if the process exits within `seconds`."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if not self.running():
                raise AssertionError("process exited (rc=%s) but should keep running; log tail:\n%s"
                                     % (self.returncode, self.log_tail()))
            time.sleep(0.1)

    # -- signals -----------------------------------------------------------

    def signal(self, sig):
        if self.running():
            os.kill(self.pid, sig)

    def terminate(self, timeout=30):
        """SIGTERM and wait; returns the exit code. SIGKILLs and fails if it
        does not stop within timeout."""
        self.rss_peak_kb()
        self.signal(signal.SIGTERM)
        if not self._reap(timeout):
            self.kill()
            raise AssertionError("process ignored SIGTERM for %.1fs; log tail:\n%s"
                                 % (timeout, self.log_tail()))
        return self.returncode

    def kill(self):
        """SIGKILL and reap; returns the exit code."""
        self.rss_peak_kb()
        self.signal(signal.SIGKILL)
        self._reap(10)
        return self.returncode

    def rss_peak_kb(self):
        """Peak resident set size in KiB: VmHWM while running, ru_maxrss of
        the reaped child afterwards."""
        if self.returncode is None:
            try:
                with open("/proc/%d/status" % self.pid) as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            self._last_hwm = int(line.split()[1])
                            break
            except OSError:
                pass
        if self.returncode is not None and self._maxrss_kb is not None:
            return max(self._maxrss_kb, self._last_hwm or 0)
        return self._last_hwm

    def cleanup(self):
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._reap(10)
        try:
            self._log.close()
        except Exception:
            pass
        _unregister(self)


class ProcessFactory:
    """Starts `binary` as a Process per call: factory(*args, env=None); the
    log of the Nth is <log_dir>/<name>-N.log. cleanup() SIGKILLs every one
    still running (a fixture's teardown)."""

    def __init__(self, binary, log_dir, name):
        self.binary, self.log_dir, self.name = binary, log_dir, name
        self.procs = []

    def __call__(self, *args, env=None):
        log = os.path.join(self.log_dir, "%s-%d.log" % (self.name, len(self.procs) + 1))
        p = Process([self.binary] + [str(a) for a in args], log, env=env)
        self.procs.append(p)
        return p

    def cleanup(self):
        for p in self.procs:
            p.cleanup()
