"""A job's log as a GitLab runner writes it (gitlab-runner's helpers/trace): section markers,
ANSI colours, masked values replaced by `[MASKED]`, and the runner's output limit (4 MiB by
default, `output_limit`), past which one yellow notice is written and nothing more is kept.
"""

import threading
import time

BOLD_GREEN = "\x1b[32;1m"
BOLD_RED = "\x1b[31;1m"
BOLD_CYAN = "\x1b[36;1m"
BOLD_YELLOW = "\x1b[33;1m"
RESET = "\x1b[0;m"
CLEAR = "\x1b[0K"


class Trace:
    """The log of one job; writers append, readers take the bytes so far."""

    def __init__(self, limit, masked=()):
        self._data = bytearray()
        self._lock = threading.Lock()
        self._limit = limit
        self._full = False
        # Longest first, so a value containing another is masked whole.
        self._masked = sorted({m for m in masked if m}, key=len, reverse=True)

    def bytes(self):
        with self._lock:
            return bytes(self._data)

    def size(self):
        with self._lock:
            return len(self._data)

    def write(self, text):
        for value in self._masked:
            text = text.replace(value, "[MASKED]")
        data = text.encode("utf-8", "replace")
        with self._lock:
            if self._full:
                return
            room = self._limit - len(self._data)
            if len(data) <= room:
                self._data += data
                return
            # Cut at the limit, on a whole UTF-8 character, then the runner's notice.
            cut = data[:max(room, 0)]
            while cut and (cut[-1] & 0xC0) == 0x80:
                cut = cut[:-1]
            if cut and cut[-1] >= 0xC0:
                cut = cut[:-1]
            self._data += cut
            self._data += (f"\n{BOLD_YELLOW}Job's log exceeded limit of {self._limit} bytes.\n"
                           f"Job execution will continue but no more output will be collected.{RESET}\n").encode()
            self._full = True

    # The runner's framing of a job's log.

    def header(self, version="17.11.0"):
        self.write(f"{CLEAR}Running with gitlab-runner {version} (fake: gitlab-ci-local){RESET}\n"
                   f"{CLEAR}  on fake-shell-runner FaKe1234, system ID: s_fake{RESET}\n")

    def section_start(self, name, title):
        self.write(f"section_start:{int(time.time())}:{name}\r{CLEAR}{CLEAR}{BOLD_CYAN}{title}{RESET}{RESET}\n")

    def section_end(self, name):
        self.write(f"section_end:{int(time.time())}:{name}\r{CLEAR}\n")

    def command(self, line):
        self.write(f"{BOLD_GREEN}$ {line}{RESET}\n")

    def succeeded(self):
        self.write(f"{CLEAR}{BOLD_GREEN}Job succeeded{RESET}\n")

    def failed(self, reason):
        self.write(f"{CLEAR}{BOLD_RED}ERROR: Job failed: {reason}\n{RESET}\n")


def go_duration(seconds):
    """A duration as Go prints it (`1h0m0s`, `1m30s`, `3s`), as the runner's timeout message does."""
    seconds = int(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h}h{m}m{s}s"
    if m:
        return f"{m}m{s}s"
    return f"{s}s"
