#!/usr/bin/env python3
"""Where flowgate's CPU time goes, from `perf script -F ip,sym,dso` output with call chains
(scripts/bench/profile pipes it here).

Two views of the same samples:
  * own time by area: each sample goes to the code it was running (its innermost frame): a
    Rust crate, a part of libc, or what the kernel was doing for the process (the system call
    found in the kernel frames);
  * time inside each stage of a request: a sample counts for every stage whose function is on
    its stack (stages nest, so these shares overlap).
"""

import re
import sys
from collections import Counter

# Kernel work, by the first matching frame from the innermost outwards.
KERNEL = [
    (r"tcp_sendmsg|sys_sendto|sys_write\b|ksys_write|sock_write|tcp_push|__tcp_transmit", "kernel: network send"),
    (r"tcp_recvmsg|sys_recvfrom|sock_read|ksys_read|sys_read\b", "kernel: network receive / file read"),
    (r"net_rx_action|__do_softirq|handle_softirqs|do_softirq|ip_rcv|tcp_v4_rcv|loopback_xmit", "kernel: network delivery (softirq)"),
    (r"ep_poll|sys_epoll|do_epoll", "kernel: epoll"),
    (r"futex", "kernel: futex (thread wake-ups)"),
    (r"sys_accept|inet_accept|sys_close|__fput|tcp_close", "kernel: connections"),
    (r"do_sys_open|sys_openat|path_openat|sys_statx|sys_newfstatat|vfs_statx|vfs_read|sys_getdents|sys_rename|sys_mkdir|vfs_write|sys_unlink|iterate_dir", "kernel: file system"),
    (r"copy_process|kernel_clone|sys_clone|sys_execve|do_exit|sys_wait|mmput|exit_mmap|sys_kill|sys_pidfd|sys_prlimit", "kernel: processes"),
    (r"sched|schedule|finish_task_switch|pick_next", "kernel: scheduler"),
    (r"page_fault|do_anonymous_page|handle_mm_fault|sys_mmap|sys_munmap|sys_madvise|sys_brk|mprotect", "kernel: memory"),
]

# Stages of a request: (label, pattern that a frame on the stack matches).
STAGES = [
    ("hyper (HTTP/1 parsing, writing)", r"^<?hyper::|^hyper::"),
    ("axum router and middleware", r"axum::"),
    ("flowgate HTTP layers (origin, name, dialect, auth, request id)", r"flowgate_server::http::"),
    ("rmcp (StreamableHttpService, per-request service)", r"rmcp::"),
    ("JSON (serde_json, anywhere)", r"serde_json::"),
    ("tracing (spans, events)", r"^<?tracing|tracing_core::|tracing_subscriber::"),
    ("flowgate handler (tasks, calls)", r"flowgate_server::(tasks|calls|handler)"),
    ("task handle open / seal", r"flowgate_core::handle::"),
    ("local engine (run folder reads, start)", r"flowgate_local::"),
    ("process spawn", r"process::.*spawn|Command::spawn|posix_spawn"),
    ("allocator (malloc, free)", r"^(__libc_)?(malloc|free|realloc|calloc|cfree)$|^_int_(malloc|free|realloc)|malloc_consolidate|^mi_|^_rjem_|^je_"),
]


def crate_of(sym):
    s = sym.lstrip("<&* ").replace("mut ", "").replace("dyn ", "")
    m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)::", s)
    return m.group(1) if m else None


def area(frames):
    ip, sym, dso = frames[0]
    if "kernel" in dso or dso.startswith("[k"):
        for _, s, d in frames:
            if "kernel" not in d and not d.startswith("[k"):
                break
            for pattern, label in KERNEL:
                if re.search(pattern, s):
                    return label
        return "kernel: other"
    if "libc" in dso:
        if re.search(r"malloc|free|realloc|calloc|_int_|tcache|arena", sym):
            return "libc: malloc / free"
        if re.search(r"mem(cpy|move|set|cmp)|str", sym):
            return "libc: memcpy / strings"
        return "libc: other"
    crate = crate_of(sym)
    if crate:
        return f"crate {crate}"
    if sym.startswith("["):
        return "unknown"
    return f"other ({sym[:40]})"


def samples(stream):
    frames = []
    for line in stream:
        line = line.rstrip("\n")
        if not line.strip():
            if frames:
                yield frames
            frames = []
            continue
        parts = line.strip().split(None, 1)
        if len(parts) < 2:
            continue
        ip, rest = parts
        m = re.match(r"(.*) \(([^()]*)\)$", rest)
        sym, dso = (m.group(1), m.group(2)) if m else (rest, "")
        sym = re.sub(r"\+0x[0-9a-f]+$", "", sym)
        frames.append((ip, sym, dso))
    if frames:
        yield frames


def main():
    own = Counter()
    inside = Counter()
    total = 0
    for frames in samples(sys.stdin):
        total += 1
        own[area(frames)] += 1
        for label, pattern in STAGES:
            if any(re.search(pattern, s) for _, s, _ in frames):
                inside[label] += 1
    if not total:
        print("no samples")
        return
    print(f"{total} samples\n-- own time by area --")
    for label, n in own.most_common(25):
        print(f"{100 * n / total:6.1f} %  {label}")
    print("-- time inside each stage (overlapping) --")
    for label, _ in STAGES:
        print(f"{100 * inside[label] / total:6.1f} %  {label}")


if __name__ == "__main__":
    main()
