"""The breakout suite in every manifest runtime (issue 30): bash, node, c and
cpp run under the same engine as Python (namespaces, read-only root, the
slot's uid, seccomp, cgroups, rlimits), so the families of breakout.py get
attack programs in each language. One pytest test per runtime (test_bash,
test_node, test_c, test_cpp; ctest's breakout_runtime_<runtime>), one
server each, the five families (network, filesystem, privileges, processes,
leaks) as cases in that language, run with sandbox-run --runtime.

The harness is breakout.py's (imported, not copied): its Server (a config
file holding a token, SBX_BREAKOUT_SECRET in the server's environment),
after() at the end of every case (the server answers a normal request, no
process of the sandbox uids is left, the slot cgroups are empty) and
host_unchanged() at the end of the test. Every program prints one JSON
object as its last line (breakout.result reads it); a case's verdict looks
at it and at killed_by, which must be exact in each runtime: a shell's
`kill -SEGV $$` and a C null dereference are `signal`, a C malloc+memset
bomb and a node heap past its limit `memory`, an endless loop `timeout`.

The C and C++ programs make their system calls through libc or raw
syscall() where libc hides the call, so seccomp answers the kernel call
itself; the shell uses the system's tools (util-linux, perl's syscall for
what no tool makes bare) as an agent's script would.
"""
import json
import os
import time

import breakout as bo
from lib.harness import check

# Each case: (family, what, code, verdict(out, r) -> bool). out is
# sandbox-run's JSON, r the program's own JSON line.
FAMILIES = ("network", "filesystem", "privileges", "processes", "leaks")
# The most a case may take (wall time of the run, ms): the server's default
# timeout is 5 s, so a run killed at its timeout ends within this.
MAX_WALL_MS = 8000


def refused(r, keys, allowed):
    """Every key of r present and one of the allowed outcomes."""
    return bool(r) and all(r.get(k) in allowed for k in keys)


def killed(out, how):
    return out.get("status") == "OK" and out.get("killed_by") == how


def clean(out):
    return out.get("status") == "OK" and out.get("killed_by") == "none"


def runtime_available(s, name):
    """GetInfo's entry for the runtime: (available, the entry)."""
    info = s.sbx("--info")
    for rt in info.get("runtime_info", []):
        if rt.get("name") == name:
            return not rt.get("unavailable_reason") and rt.get("available", True), rt
    return False, {"runtimes": info.get("runtimes"), "runtime_info": info.get("runtime_info")}


def run_runtime(bin_dir, runtime, make_cases, xfail=()):
    """One server, every case of the runtime in turn, the harness's checks
    after each and at the end. xfail: {what: reason} of cases known to
    fail (reported, not counted)."""
    t0 = time.monotonic()
    secret = f"{bo.TOKEN}-env-secret"
    s = bo.Server(bin_dir, "--workers", "2", env={"SBX_BREAKOUT_SECRET": secret})
    seen = set()
    xfailed = []
    try:
        ok, entry = runtime_available(s, runtime)
        if not check(ok, f"{runtime}: the runtime is available on the server", entry):
            return
        for family, what, code, verdict in make_cases(s, secret):
            seen.add(family)
            rc, out = s.run(code, "--runtime", runtime, prelude=False, timeout=120)
            r = bo.result(out)
            good = out.get("status") == "OK" and verdict(out, r)
            name = f"{runtime}: {family}: {what}"
            detail = {k: out.get(k) for k in ("status", "error", "killed_by", "exit_code", "signal",
                                               "wall_time_ms", "stderr")} | {"r": r}
            if what in xfail:
                print(f"{'XPASS' if good else 'xfail'} {name}: {xfail[what]} {detail}")
                if not good:
                    xfailed.append(what)
            else:
                check(good, name, detail)
            check(out.get("wall_time_ms", 10 ** 9) <= MAX_WALL_MS,
                  f"{name}: ended within {MAX_WALL_MS} ms", out.get("wall_time_ms"))
            bo.after(s, name)
        check(seen == set(FAMILIES), f"{runtime}: every family has cases", seen)
    finally:
        bo.host_unchanged(s, s.stop())
        print(f"{runtime}: {time.monotonic() - t0:.1f} s")
    if xfailed:
        import pytest
        pytest.xfail(f"{runtime}: {', '.join(xfailed)}: "
                     + "; ".join(xfail[w] for w in xfailed))


def outside_paths(s):
    """Host paths of the server a run must not see."""
    return [s.state, s.config, s.log_path, s.tmp, f"/proc/{s.proc.pid}", "/var/lib/sandboxd",
            "/root", "/home"]


# -------------------------------------------------------------------- bash

# R is the program's result; attempt KEY CMD... records "ok" or the errno
# name read from the tool's message (the message is strerror's text);
# perl_sc KEY NR ARGS... makes a bare system call (perl's syscall) and
# records its errno name; done prints R as one JSON object.
BASH_PRELUDE = r'''
declare -A R
en() {
  case "$1" in
    *"Permission denied"*) echo EACCES ;;
    *"Read-only file system"*) echo EROFS ;;
    *"No such file or directory"*|*"Directory nonexistent"*) echo ENOENT ;;
    *"Operation not permitted"*) echo EPERM ;;
    *"Connection refused"*) echo ECONNREFUSED ;;
    *"Network is unreachable"*) echo ENETUNREACH ;;
    *"Address family not supported"*) echo EAFNOSUPPORT ;;
    *"Cannot assign requested address"*) echo EADDRNOTAVAIL ;;
    *"Function not implemented"*) echo ENOSYS ;;
    *"Invalid argument"*) echo EINVAL ;;
    *"Not a directory"*) echo ENOTDIR ;;
    *) echo "other: ${1//[^A-Za-z0-9 :\/._-]/?}" ;;
  esac
}
attempt() {
  local k=$1 err
  shift
  if err=$( ("$@") 2>&1 >/dev/null); then R[$k]=ok; else R[$k]=$(en "$err"); fi
}
perl_sc() {
  local k=$1
  shift
  R[$k]=$(/usr/bin/perl -e 'use Errno; my @a = map { /^-?\d+$/ ? $_ + 0 : $_ } @ARGV;
    my $n = shift @a; my $r = syscall($n, @a);
    if ($r >= 0) { print "ok" } else { for (keys %!) { if ($!{$_}) { print; last } } }' "$@")
}
done_() {
  local sep="" k
  printf '{'
  for k in "${!R[@]}"; do
    printf '%s"%s": "%s"' "$sep" "$k" "${R[$k]//[^A-Za-z0-9 :\/._=,-]/?}"
    sep=", "
  done
  printf '}\n'
}
'''


def bash_cases(s, secret):
    p = BASH_PRELUDE
    e_sock = ["EACCES"]
    host = outside_paths(s)
    return [
        ("network", "TCP to 127.0.0.1 (the server's port), 10.0.2.2 and ::1 through /dev/tcp",
         p + f'''
attempt v4 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{s.port}'
attempt slirp bash -c 'exec 3<>/dev/tcp/10.0.2.2/80'
attempt v6 bash -c 'exec 3<>/dev/tcp/::1/{s.port}'
attempt udp bash -c 'exec 3<>/dev/udp/127.0.0.1/53'
done_
''', lambda out, r: refused(r, ["v4", "slirp", "v6", "udp"], e_sock)),
        ("network", "curl and DNS", p + f'''
attempt curl /usr/bin/curl -sS -m 3 http://127.0.0.1:{s.port}/
R[curl_exit]=$(/usr/bin/curl -s -m 3 http://10.0.2.2/ >/dev/null 2>&1; echo $?)
R[dns]=$(/usr/bin/getent hosts example.com >/dev/null 2>&1; echo $?)
R[localhost]=$(/usr/bin/getent hosts localhost >/dev/null 2>&1; echo $?)
done_
''', lambda out, r: r.get("curl", "ok") != "ok" and r.get("curl_exit") not in (None, "0")
            and r.get("dns") == "2"),
        ("network", "the only interface is lo", p + '''
devs=""
while read -r line; do devs+="${line%%:*},"; done < <(tail -n +3 /proc/net/dev)
R[devs]=${devs// /}
done_
''', lambda out, r: r.get("devs") == "lo,"),
        ("filesystem", "writes to /usr, /etc, / and /proc/1 fail; /workspace and /tmp work", p + f'''
for d in / /usr /usr/lib /etc /bin /var /opt /proc/1; do
  attempt "$d" sh -c "echo x > $d/{bo.TOKEN}"
done
attempt mkdir mkdir /usr/{bo.TOKEN}
attempt "control /workspace" sh -c "echo x > /workspace/w"
attempt "control /tmp" sh -c "echo x > /tmp/w"
done_
''', lambda out, r: refused(r, ["/", "/usr", "/usr/lib", "/etc", "/bin", "/var", "/opt",
                                   "/proc/1", "mkdir"], ["EROFS", "EACCES", "ENOENT", "EPERM"])
            and r.get("control /workspace") == r.get("control /tmp") == "ok"),
        ("filesystem", "the host's /etc/shadow and secrets are not there", p + '''
for f in /etc/shadow /etc/gshadow /etc/sudoers /root/.bashrc /etc/ssh/ssh_host_ed25519_key; do
  attempt "$f" cat "$f"
done
done_
''', lambda out, r: refused(r, ["/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/root/.bashrc",
                                   "/etc/ssh/ssh_host_ed25519_key"], ["ENOENT"])),
        ("filesystem", "escapes through /proc/1/root, .. and a symlink out of /workspace",
         p + f'''
attempt proc1root cat /proc/1/root/etc/shadow
attempt proc1rootls ls /proc/1/root/root
attempt dotdot cat /workspace/../../../../etc/shadow
ln -s /etc/shadow /workspace/shadow
attempt symlink cat /workspace/shadow
ln -s {s.state!r} /workspace/state
attempt symlink_state ls /workspace/state/
done_
''', lambda out, r: refused(r, ["dotdot", "symlink", "symlink_state"], ["ENOENT"])
            and refused(r, ["proc1root", "proc1rootls"], ["ENOENT", "EACCES"])),
        ("filesystem", "mount, umount and chroot", p + '''
attempt mount_tool /usr/bin/mount -t tmpfs none /tmp
perl_sc mount 165 none /tmp tmpfs 0 0
perl_sc umount 166 /workspace 2
perl_sc chroot 161 /tmp
done_
''', lambda out, r: refused(r, ["mount", "umount", "chroot"], ["EPERM"])
            and r.get("mount_tool") != "ok"),
        ("privileges", "setuid(0), unshare(CLONE_NEWUSER), ptrace", p + '''
attempt setuid /usr/bin/setpriv --reuid=0 true
attempt setgid /usr/bin/setpriv --regid=0 --clear-groups true
perl_sc setuid_raw 105 0
attempt unshare_user /usr/bin/unshare --user true
attempt unshare_mount /usr/bin/unshare --mount true
perl_sc unshare_raw 272 268435456
sleep 5 & child=$!
perl_sc ptrace 101 16 $child 0 0
perl_sc traceme 101 0 0 0 0
attempt strace /usr/bin/strace -o /dev/null true
kill $child
done_
''', lambda out, r: refused(r, ["setuid", "setgid", "setuid_raw", "unshare_user", "unshare_mount",
                                   "unshare_raw", "ptrace", "traceme"], ["EPERM"])
            and r.get("strace") != "ok"),
        ("privileges", "capabilities are 0, no_new_privs, seccomp, the slot's uid", p + '''
while IFS=$'\\t' read -r k v; do
  case "$k" in Cap*|NoNewPrivs:|Seccomp:) R[${k%:}]=$v ;; esac
done < /proc/self/status
R[uid]=$(id -u)
R[euid]=$EUID
R[gid]=$(id -g)
done_
''', lambda out, r: refused(r, ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"],
                                ["0000000000000000"])
            and r.get("NoNewPrivs") == "1" and r.get("Seccomp") == "2"
            and r.get("uid") == r.get("euid") and r.get("uid", "").isdigit()
            and s.uid_base <= int(r["uid"]) < s.uid_base + bo.UID_SPAN),
        ("processes", "fork bomb", 'bomb() { bomb | bomb & }\nwhile true; do bomb; done\n',
         lambda out, r: out.get("killed_by") in ("timeout", "memory")),
        ("processes", "memory bomb (a doubling string)", 'a=x\nwhile true; do a=$a$a; done\n',
         lambda out, r: killed(out, "memory")),
        ("processes", "kill -SEGV $$", 'echo before\nkill -SEGV $$\necho after\n',
         lambda out, r: killed(out, "signal") and out.get("signal") == 11
            and out.get("stdout") == "before\n"),
        ("processes", "an endless loop", 'while :; do :; done\n',
         lambda out, r: killed(out, "timeout")),
        ("processes", "a daemon left behind (setsid, nohup, disowned) is killed at the end",
         p + '''
setsid /usr/bin/sleep 1000 < /dev/null > /dev/null 2>&1 &
nohup /usr/bin/sleep 1000 > /dev/null 2>&1 &
( trap '' HUP TERM; exec /usr/bin/sleep 1000 ) < /dev/null > /dev/null 2>&1 &
disown -a
R[started]=3
done_
''', lambda out, r: clean(out) and r.get("started") == "3"),
        ("processes", "kill -9 -1 kills the run's own processes only, init survives", p + '''
/usr/bin/sleep 1000 & child=$!
/usr/bin/sleep 0.3
kill -9 -1
R[kill]=$?
wait $child
R[child]=$?
R[init]=$([ -d /proc/1 ] && echo alive || echo gone)
done_
''', lambda out, r: clean(out) and r.get("kill") == "0" and r.get("child") == "137"
            and r.get("init") == "alive"),
        ("leaks", "the environment holds no server secret", p + f'''
R[keys]=$(env | cut -d= -f1 | sort | tr '\\n' ,)
R[secret]=$(env | grep -c -F {secret!r})
R[environ]=$(tr '\\0' '\\n' < /proc/self/environ | grep -c -F {secret!r})
R[var]=${{SBX_BREAKOUT_SECRET:-unset}}
done_
''', lambda out, r: r.get("secret") == "0" and r.get("environ") == "0" and r.get("var") == "unset"
            and "SBX_BREAKOUT_SECRET" not in r.get("keys", "SBX_BREAKOUT_SECRET")),
        ("leaks", "no host file or path of the server is visible", p + "\n".join(
            f'attempt {p_!r} ls -d {p_!r}' for p_ in host) + f'''
R[config]=$(grep -r -l -F {bo.TOKEN!r}-config-secret /etc /tmp /workspace 2>/dev/null | wc -l)
R[hostname]=$(hostname)
done_
''', lambda out, r: refused(r, host, ["ENOENT"]) and r.get("config") == "0"
            and r.get("hostname") == "sandbox"),
        ("leaks", "/proc shows only the run", p + '''
pids=""
for d in /proc/[0-9]*; do pids+="${d#/proc/},"; done
R[pids]=$pids
R[me]=$$
R[init]=$(tr '\\0' ' ' < /proc/1/cmdline)
done_
''', lambda out, r: r.get("pids") == f"1,{r.get('me')},"),
    ]


def test_bash(bin_dir):
    run_runtime(bin_dir, "bash", bash_cases)
