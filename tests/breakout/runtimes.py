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


def run_runtime(bin_dir, runtime, make_cases):
    """One server, every case of the runtime in turn, the harness's checks
    after each and at the end."""
    # breakout.py's flavors (SBX_BREAKOUT_FRONT, _MODE, _PACKAGE, _NET) are
    # Python's: they would change the runtime and the server.
    assert not (bo.FRONT or bo.MODE or bo.HOOK or bo.POLICY), "no SBX_BREAKOUT_* flavor here"
    t0 = time.monotonic()
    secret = f"{bo.TOKEN}-env-secret"
    s = bo.Server(bin_dir, "--workers", "2", env={"SBX_BREAKOUT_SECRET": secret})
    seen = set()
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
                                               "wall_time_ms", "stderr", "compile")} | {"r": r}
            check(good, name, detail)
            check(out.get("wall_time_ms", 10 ** 9) <= MAX_WALL_MS,
                  f"{name}: ended within {MAX_WALL_MS} ms", out.get("wall_time_ms"))
            bo.after(s, name)
        check(seen == set(FAMILIES), f"{runtime}: every family has cases", seen)
    finally:
        bo.host_unchanged(s, s.stop())
        print(f"{runtime}: {time.monotonic() - t0:.1f} s")


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
        ("filesystem", "writes to /usr, /etc, / and /proc/1 fail; /workspace and /tmp work",
         p + f'''
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


# ------------------------------------------------------------------ c, cpp

# Compiles as C and as C++ (g++ defines _GNU_SOURCE itself). put() records
# one key, rv() "ok" or the errno's name for a call that returns -1 and sets
# errno (libc's wrappers, raw syscall()), done() prints R as JSON.
C_PRELUDE = r'''
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>
static char R_[32768];
static size_t R_n;
static void put(const char *k, const char *v) {
  R_n += (size_t)snprintf(R_ + R_n, sizeof R_ - R_n, "%s\"%s\": \"", R_n ? ", " : "", k);
  for (; *v && R_n < sizeof R_ - 8; v++)
    R_[R_n++] = (*v == '"' || *v == '\\' || (unsigned char)*v < 32) ? '?' : *v;
  R_n += (size_t)snprintf(R_ + R_n, sizeof R_ - R_n, "\"");
}
static void puti(const char *k, long v) {
  char b[32];
  snprintf(b, sizeof b, "%ld", v);
  put(k, b);
}
static const char *en(int e) {
  const char *n = strerrorname_np(e);
  return n ? n : "?";
}
static void rv(const char *k, long r) { put(k, r >= 0 ? "ok" : en(errno)); }
static long op(const char *p, int flags) {
  int fd = open(p, flags, 0644);
  if (fd >= 0)
    close(fd);
  return fd;
}
static void done(void) {
  printf("{%s}\n", R_);
  fflush(stdout);
}
'''

C_NET = r'''
static const char *tcp(int fam, int type, const char *addr, int port) {
  int s = socket(fam, type, 0);
  if (s < 0)
    return en(errno);
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  socklen_t len;
  if (fam == AF_INET) {
    struct sockaddr_in *a = (struct sockaddr_in *)&ss;
    a->sin_family = AF_INET;
    a->sin_port = htons((unsigned short)port);
    inet_pton(AF_INET, addr, &a->sin_addr);
    len = sizeof *a;
  } else {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
    a->sin6_family = AF_INET6;
    a->sin6_port = htons((unsigned short)port);
    inet_pton(AF_INET6, addr, &a->sin6_addr);
    len = sizeof *a;
  }
  int r = connect(s, (struct sockaddr *)&ss, len);
  int e = errno;
  close(s);
  return r == 0 ? "ok" : en(e);
}
'''


def c_cases(s, secret, cpp=False):
    """The families as C programs (C++ with cpp: the same system calls
    compiled by g++, and C++'s own allocation, threads and exceptions where
    the language has its own)."""
    p = C_PRELUDE
    host = outside_paths(s)
    tok = bo.TOKEN
    host_c = ", ".join(json.dumps(h) for h in host)
    cases = [
        ("network", "TCP to 127.0.0.1 (the server's port), 10.0.2.2 and ::1; UDP; raw socket()",
         p + C_NET + f'''
int main(void) {{
  put("v4", tcp(AF_INET, SOCK_STREAM, "127.0.0.1", {s.port}));
  put("slirp", tcp(AF_INET, SOCK_STREAM, "10.0.2.2", 80));
  put("v6", tcp(AF_INET6, SOCK_STREAM, "::1", {s.port}));
  put("udp", tcp(AF_INET, SOCK_DGRAM, "127.0.0.1", 53));
  rv("raw inet", syscall(SYS_socket, AF_INET, SOCK_STREAM, 0));
  rv("raw packet", syscall(SYS_socket, 17, SOCK_RAW, 0));
  rv("raw netlink", syscall(SYS_socket, AF_NETLINK, SOCK_RAW, 0));
  rv("control unix", syscall(SYS_socket, AF_UNIX, SOCK_STREAM, 0));
  done();
  return 0;
}}
''', lambda out, r: refused(r, ["v4", "slirp", "v6", "udp", "raw inet", "raw packet",
                                   "raw netlink"], ["EACCES"]) and r.get("control unix") == "ok"),
        ("network", "DNS", p + '''
int main(void) {
  struct addrinfo *res = NULL;
  puti("dns", getaddrinfo("example.com", "80", NULL, &res));
  puti("dns_ip", getaddrinfo("10.0.2.3", "53", NULL, &res) == 0 ? 0 : 1);
  done();
  return 0;
}
''', lambda out, r: r.get("dns") not in (None, "0")),
        ("filesystem", "writes to /usr, /etc, / and /proc/1 fail; /workspace and /tmp work",
         p + f'''
int main(void) {{
  const char *dirs[] = {{"/", "/usr", "/usr/lib", "/etc", "/bin", "/var", "/opt", "/proc/1"}};
  char path[256];
  for (unsigned i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {{
    snprintf(path, sizeof path, "%s/{tok}", dirs[i]);
    rv(dirs[i], op(path, O_WRONLY | O_CREAT | O_TRUNC));
  }}
  rv("mkdir", mkdir("/usr/{tok}", 0755));
  rv("control /workspace", op("/workspace/w", O_WRONLY | O_CREAT));
  rv("control /tmp", op("/tmp/w", O_WRONLY | O_CREAT));
  done();
  return 0;
}}
''', lambda out, r: refused(r, ["/", "/usr", "/usr/lib", "/etc", "/bin", "/var", "/opt",
                                   "/proc/1", "mkdir"], ["EROFS", "EACCES", "ENOENT", "EPERM"])
            and r.get("control /workspace") == r.get("control /tmp") == "ok"),
        ("filesystem", "the host's /etc/shadow and secrets are not there", p + '''
int main(void) {
  const char *f[] = {"/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/root/.bashrc",
                     "/etc/ssh/ssh_host_ed25519_key"};
  for (unsigned i = 0; i < sizeof f / sizeof f[0]; i++)
    rv(f[i], op(f[i], O_RDONLY));
  done();
  return 0;
}
''', lambda out, r: refused(r, ["/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/root/.bashrc",
                                   "/etc/ssh/ssh_host_ed25519_key"], ["ENOENT"])),
        ("filesystem", "escapes through /proc/1/root, .., a symlink out of /workspace, chroot",
         p + f'''
int main(void) {{
  rv("proc1root", op("/proc/1/root/etc/shadow", O_RDONLY));
  rv("dotdot", op("/workspace/../../../../etc/shadow", O_RDONLY));
  symlink("/etc/shadow", "/workspace/shadow");
  rv("symlink", op("/workspace/shadow", O_RDONLY));
  symlink({json.dumps(s.state)}, "/workspace/state");
  rv("symlink_state", op("/workspace/state/", O_RDONLY | O_DIRECTORY));
  rv("chroot", syscall(SYS_chroot, "/tmp"));
  done();
  return 0;
}}
''', lambda out, r: refused(r, ["dotdot", "symlink", "symlink_state"], ["ENOENT"])
            and refused(r, ["proc1root"], ["ENOENT", "EACCES"]) and r.get("chroot") == "EPERM"),
        ("filesystem", "mount, umount, pivot_root, open_tree", p + '''
int main(void) {
  rv("mount", syscall(SYS_mount, "none", "/tmp", "tmpfs", 0L, NULL));
  rv("bind", mount("/", "/tmp", NULL, MS_BIND | MS_REC, NULL));
  rv("umount", syscall(SYS_umount2, "/workspace", 2L));
  rv("pivot_root", syscall(SYS_pivot_root, "/tmp", "/tmp"));
  rv("open_tree", syscall(428, -100L, "/", 1L));
  done();
  return 0;
}
''', lambda out, r: refused(r, ["mount", "bind", "umount", "pivot_root", "open_tree"], ["EPERM"])),
        ("privileges", "setuid(0), unshare(CLONE_NEWUSER), clone into namespaces, ptrace", p + '''
int main(void) {
  rv("setuid", syscall(SYS_setuid, 0L));
  rv("setresuid", syscall(SYS_setresuid, 0L, 0L, 0L));
  rv("setgid", syscall(SYS_setgid, 0L));
  rv("setgroups", syscall(SYS_setgroups, 0L, NULL));
  rv("unshare user", unshare(CLONE_NEWUSER));
  rv("unshare raw", syscall(SYS_unshare, (long)(CLONE_NEWUSER | CLONE_NEWNS)));
  rv("clone newuser", syscall(SYS_clone, (long)(CLONE_NEWUSER | SIGCHLD), 0L, 0L, 0L, 0L));
  rv("setns", setns(open("/proc/self/ns/net", O_RDONLY), 0));
  pid_t c = fork();
  if (c == 0) {
    sleep(5);
    _exit(0);
  }
  usleep(100000);
  rv("attach", syscall(SYS_ptrace, (long)PTRACE_ATTACH, (long)c, 0L, 0L));
  rv("seize", syscall(SYS_ptrace, 0x4206L, (long)c, 0L, 0L));
  rv("traceme", syscall(SYS_ptrace, (long)PTRACE_TRACEME, 0L, 0L, 0L));
  rv("proc1 mem", op("/proc/1/mem", O_RDONLY));
  kill(c, SIGKILL);
  done();
  return 0;
}
''', lambda out, r: refused(r, ["setuid", "setresuid", "setgid", "setgroups", "unshare user",
                                   "unshare raw", "clone newuser", "setns", "attach", "seize",
                                   "traceme"], ["EPERM"])
            and r.get("proc1 mem") in ("EACCES", "EPERM")),
        ("privileges", "capabilities are 0 (capget and /proc), no_new_privs, the slot's uid",
         p + '''
int main(void) {
  struct __user_cap_header_struct h;
  struct __user_cap_data_struct d[2];
  memset(&h, 0, sizeof h);
  memset(d, 0xff, sizeof d);
  h.version = _LINUX_CAPABILITY_VERSION_3;
  rv("capget", syscall(SYS_capget, &h, d));
  puti("capget_any", (long)(d[0].effective | d[0].permitted | d[0].inheritable |
                            d[1].effective | d[1].permitted | d[1].inheritable));
  char line[256];
  FILE *f = fopen("/proc/self/status", "r");
  while (f && fgets(line, sizeof line, f)) {
    char *tab = strchr(line, '\\t');
    if (!tab || (strncmp(line, "Cap", 3) && strncmp(line, "NoNewPrivs", 10) &&
                 strncmp(line, "Seccomp:", 8)))
      continue;
    tab[-1] = 0;
    tab[strcspn(tab, "\\n")] = 0;
    put(line, tab + 1);
  }
  puti("uid", (long)getuid());
  puti("euid", (long)geteuid());
  done();
  return 0;
}
''', lambda out, r: r.get("capget") == "ok" and r.get("capget_any") == "0"
            and refused(r, ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"],
                        ["0000000000000000"])
            and r.get("NoNewPrivs") == "1" and r.get("Seccomp") == "2"
            and r.get("uid") == r.get("euid") and r.get("uid", "x").isdigit()
            and s.uid_base <= int(r["uid"]) < s.uid_base + bo.UID_SPAN),
        ("processes", "fork bomb", p + '''
int main(void) {
  for (;;)
    fork();
}
''', lambda out, r: out.get("killed_by") in ("timeout", "memory")),
        ("processes", "malloc+memset bomb", p + '''
int main(void) {
  for (;;) {
    char *m = (char *)malloc(16 << 20);
    if (!m) {
      put("malloc", "NULL");
      done();
      return 1;
    }
    memset(m, 1, 16 << 20);
  }
}
''', lambda out, r: killed(out, "memory")),
        ("processes", "null dereference", p + '''
int main(void) {
  puts("before");
  fflush(stdout);
  volatile int *z = NULL;
  *z = 1;
  puts("after");
  return 0;
}
''', lambda out, r: killed(out, "signal") and out.get("signal") == 11
            and out.get("stdout") == "before\n"),
        ("processes", "an endless loop", p + '''
int main(void) {
  volatile unsigned long n = 0;
  for (;;)
    n++;
}
''', lambda out, r: killed(out, "timeout")),
        ("processes", "a double-forked daemon is killed at the run's end", p + '''
int main(void) {
  if (fork() == 0) {
    setsid();
    if (fork() == 0) {
      signal(SIGHUP, SIG_IGN);
      signal(SIGTERM, SIG_IGN);
      close(0);
      close(1);
      close(2);
      for (;;)
        pause();
    }
    _exit(0);
  }
  wait(NULL);
  put("parent", "exits");
  done();
  return 0;
}
''', lambda out, r: clean(out) and r.get("parent") == "exits"),
        ("processes", "kill(-1, SIGKILL) kills the run's own processes only, init survives",
         p + '''
int main(void) {
  pid_t c = fork();
  if (c == 0) {
    for (;;)
      pause();
  }
  usleep(200000);
  rv("kill", kill(-1, SIGKILL));
  int st = 0;
  waitpid(c, &st, 0);
  puti("child", WIFSIGNALED(st) ? WTERMSIG(st) : -1);
  rv("init", kill(1, 0));
  rv("kill init", kill(1, SIGKILL));
  usleep(100000);
  put("init alive", access("/proc/1/stat", F_OK) == 0 ? "yes" : "no");
  done();
  return 0;
}
''', lambda out, r: clean(out) and r.get("kill") == "ok" and r.get("child") == "9"
            and r.get("init alive") == "yes"),
        ("leaks", "the environment holds no server secret", p + f'''
extern char **environ;
int main(void) {{
  put("getenv", getenv("SBX_BREAKOUT_SECRET") ? "set" : "unset");
  int found = 0;
  for (char **e = environ; *e; e++)
    found += strstr(*e, {json.dumps(secret)}) != NULL;
  char buf[65536];
  int fd = open("/proc/self/environ", O_RDONLY);
  long n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
  for (long i = 0; i < n; i++)
    buf[i] = buf[i] ? buf[i] : '\\n';
  buf[n > 0 ? n : 0] = 0;
  found += strstr(buf, {json.dumps(secret)}) != NULL;
  puti("found", found);
  done();
  return 0;
}}
''', lambda out, r: r.get("getenv") == "unset" and r.get("found") == "0"),
        ("leaks", "no host file or path of the server is visible", p + f'''
int main(void) {{
  const char *paths[] = {{{host_c}}};
  struct stat st;
  for (unsigned i = 0; i < sizeof paths / sizeof paths[0]; i++)
    rv(paths[i], stat(paths[i], &st));
  struct utsname u;
  uname(&u);
  put("hostname", u.nodename);
  done();
  return 0;
}}
''', lambda out, r: refused(r, host, ["ENOENT"]) and r.get("hostname") == "sandbox"),
        ("leaks", "/proc shows only the run", p + '''
int main(void) {
  char pids[4096] = "";
  DIR *d = opendir("/proc");
  struct dirent *e;
  int n = 0;
  long list[256];
  while (d && (e = readdir(d)) && n < 256)
    if (e->d_name[0] >= '0' && e->d_name[0] <= '9')
      list[n++] = atol(e->d_name);
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++)
      if (list[j] < list[i]) {
        long t = list[i];
        list[i] = list[j];
        list[j] = t;
      }
  for (int i = 0; i < n; i++)
    snprintf(pids + strlen(pids), sizeof pids - strlen(pids), "%ld,", list[i]);
  put("pids", pids);
  puti("me", (long)getpid());
  done();
  return 0;
}
''', lambda out, r: r.get("pids") == f"1,{r.get('me')},"),
    ]
    if cpp:
        cases += [
            ("processes", "C++: new[] and std::vector growth until the memory cap", p + '''
#include <vector>
int main() {
  std::vector<std::vector<char>> hog;
  for (;;)
    hog.emplace_back(16 << 20, 'x');
}
''', lambda out, r: killed(out, "memory")),
            ("processes", "C++: std::thread bomb is held by the process limit", p + '''
#include <chrono>
#include <system_error>
#include <thread>
#include <vector>
int main() {
  std::vector<std::thread> ts;
  try {
    for (;;)
      ts.emplace_back([] { std::this_thread::sleep_for(std::chrono::seconds(2)); });
  } catch (const std::system_error &e) {
    puti("threads", (long)ts.size());
    put("error", e.code() == std::errc::resource_unavailable_try_again ? "EAGAIN" : e.what());
  }
  for (auto &t : ts)
    t.join();
  done();
  return 0;
}
''', lambda out, r: clean(out) and r.get("error") == "EAGAIN"
                and 0 < int(r.get("threads", "999")) < 64),
            ("processes", "C++: an uncaught exception aborts (signal)", p + '''
#include <stdexcept>
int main() {
  throw std::runtime_error("boom");
}
''', lambda out, r: killed(out, "signal") and out.get("signal") == 6),
        ]
    return cases


def test_c(bin_dir):
    run_runtime(bin_dir, "c", lambda s, secret: c_cases(s, secret))


def test_cpp(bin_dir):
    run_runtime(bin_dir, "cpp", lambda s, secret: c_cases(s, secret, cpp=True))


# -------------------------------------------------------------------- node

# R is the result; attempt(f) "ok" or the error's code (EACCES, ENOENT: the
# errno name libuv reports); connect() and udp() the outcome of a socket
# (asynchronous in node); done() prints R. Node has no bare system call: what
# only a system call shows is asked of the system's tools, as a script would.
NODE_PRELUDE = r'''
const fs = require("fs"), net = require("net"), dgram = require("dgram"),
      cp = require("child_process"), os = require("os"), dns = require("dns");
const R = {};
const en = (e) => (e && e.code) ? e.code : String(e);
function attempt(f) { try { f(); return "ok"; } catch (e) { return en(e); } }
function connect(host, port) {
  return new Promise((res) => {
    const s = net.connect({host, port});
    const t = setTimeout(() => { s.destroy(); res("timeout"); }, 3000);
    s.on("connect", () => { clearTimeout(t); s.destroy(); res("ok"); });
    s.on("error", (e) => { clearTimeout(t); res(en(e)); });
  });
}
function udp(host, port) {
  return new Promise((res) => {
    let s;
    try { s = dgram.createSocket("udp4"); } catch (e) { return res(en(e)); }
    s.on("error", (e) => { s.close(); res(en(e)); });
    s.send("x", port, host, (e) => { s.close(); res(e ? en(e) : "ok"); });
  });
}
function tool(argv) {
  const p = cp.spawnSync(argv[0], argv.slice(1), {encoding: "utf8"});
  return p.status === 0 ? "ok" : `exit ${p.status}: ${(p.stderr || "").trim().slice(-80)}`;
}
function done() { console.log(JSON.stringify(R)); }
'''


def node_cases(s, secret):
    p = NODE_PRELUDE
    host = outside_paths(s)
    tok = bo.TOKEN
    return [
        ("network", "TCP to 127.0.0.1 (the server's port), 10.0.2.2 and ::1; UDP", p + f'''
(async () => {{
  R.v4 = await connect("127.0.0.1", {s.port});
  R.slirp = await connect("10.0.2.2", 80);
  R.v6 = await connect("::1", {s.port});
  R.udp = await udp("127.0.0.1", 53);
  done();
}})();
''', lambda out, r: refused(r, ["v4", "slirp", "v6", "udp"], ["EACCES"])),
        ("network", "DNS and fetch", p + f'''
(async () => {{
  R.dns = await dns.promises.lookup("example.com").then(() => "ok", en);
  R.fetch = await fetch("http://127.0.0.1:{s.port}/").then(() => "ok",
                                                         (e) => en(e.cause || e));
  done();
}})();
''', lambda out, r: r.get("dns") not in (None, "ok") and r.get("fetch") == "EACCES"),
        ("filesystem", "writes to /usr, /etc, / and /proc/1 fail; /workspace and /tmp work",
         p + f'''
for (const d of ["/", "/usr", "/usr/lib", "/etc", "/bin", "/var", "/opt", "/proc/1"])
  R[d] = attempt(() => fs.writeFileSync(d.replace(/\\/$/, "") + "/{tok}", "x"));
R.mkdir = attempt(() => fs.mkdirSync("/usr/{tok}"));
R["control /workspace"] = attempt(() => fs.writeFileSync("/workspace/w", "x"));
R["control /tmp"] = attempt(() => fs.writeFileSync("/tmp/w", "x"));
done();
''', lambda out, r: refused(r, ["/", "/usr", "/usr/lib", "/etc", "/bin", "/var", "/opt",
                                   "/proc/1", "mkdir"], ["EROFS", "EACCES", "ENOENT", "EPERM"])
            and r.get("control /workspace") == r.get("control /tmp") == "ok"),
        ("filesystem", "the host's /etc/shadow and secrets are not there", p + '''
for (const f of ["/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/root/.bashrc",
                 "/etc/ssh/ssh_host_ed25519_key"])
  R[f] = attempt(() => fs.readFileSync(f));
done();
''', lambda out, r: refused(r, ["/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/root/.bashrc",
                                   "/etc/ssh/ssh_host_ed25519_key"], ["ENOENT"])),
        ("filesystem", "escapes through /proc/1/root, .., a symlink out of /workspace; mount",
         p + f'''
R.proc1root = attempt(() => fs.readFileSync("/proc/1/root/etc/shadow"));
R.dotdot = attempt(() => fs.readFileSync("/workspace/../../../../etc/shadow"));
fs.symlinkSync("/etc/shadow", "/workspace/shadow");
R.symlink = attempt(() => fs.readFileSync("/workspace/shadow"));
fs.symlinkSync({json.dumps(s.state)}, "/workspace/state");
R.symlink_state = attempt(() => fs.readdirSync("/workspace/state"));
R.mount = tool(["/usr/bin/mount", "-t", "tmpfs", "none", "/tmp"]);
done();
''', lambda out, r: refused(r, ["dotdot", "symlink", "symlink_state"], ["ENOENT"])
            and refused(r, ["proc1root"], ["ENOENT", "EACCES"]) and r.get("mount") != "ok"),
        ("privileges", "setuid(0), setgid(0), unshare(CLONE_NEWUSER), ptrace", p + '''
R.setuid = attempt(() => process.setuid(0));
R.setgid = attempt(() => process.setgid(0));
R.setgroups = attempt(() => process.setgroups([0]));
R.unshare = tool(["/usr/bin/unshare", "--user", "true"]);
R.setpriv = tool(["/usr/bin/setpriv", "--reuid=0", "true"]);
R.strace = tool(["/usr/bin/strace", "-o", "/dev/null", "true"]);
done();
''', lambda out, r: refused(r, ["setuid", "setgid", "setgroups"], ["EPERM"])
            and all(r.get(k, "ok") != "ok" and "Operation not permitted" in r.get(k, "")
                    for k in ("unshare", "setpriv"))
            and r.get("strace", "ok") != "ok"),
        ("privileges", "capabilities are 0, no_new_privs, seccomp, the slot's uid", p + '''
for (const l of fs.readFileSync("/proc/self/status", "utf8").split("\\n")) {
  const [k, v] = l.split(":\\t");
  if (/^(Cap|NoNewPrivs|Seccomp$)/.test(k)) R[k] = v.trim();
}
R.uid = process.getuid();
R.euid = process.geteuid();
done();
''', lambda out, r: refused(r, ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"],
                                ["0000000000000000"])
            and r.get("NoNewPrivs") == "1" and r.get("Seccomp") == "2"
            and r.get("uid") == r.get("euid")
            and s.uid_base <= r.get("uid", -1) < s.uid_base + bo.UID_SPAN),
        ("processes", "fork bomb (every child spawns the program again)", p + '''
for (;;) {
  try { cp.spawn(process.execPath, [__filename], {stdio: "ignore"}); } catch (e) {}
}
''', lambda out, r: out.get("killed_by") in ("timeout", "memory")),
        ("processes", "heap bomb (the V8 heap past its limit)", p + '''
const hog = [];
for (;;) hog.push(new Array(1 << 20).fill(1.5));
''', lambda out, r: killed(out, "memory")),
        ("processes", "Buffer bomb (memory outside the V8 heap)", p + '''
const hog = [];
for (;;) hog.push(Buffer.alloc(16 << 20, 1));
''', lambda out, r: killed(out, "memory")),
        ("processes", "process.kill(process.pid, 'SIGSEGV')", p + '''
console.log("before");
process.kill(process.pid, "SIGSEGV");
setTimeout(() => console.log("after"), 1000);
''', lambda out, r: killed(out, "signal") and out.get("signal") == 11
            and out.get("stdout") == "before\n"),
        ("processes", "an endless loop", 'for (;;) {}\n',
         lambda out, r: killed(out, "timeout")),
        ("processes", "a detached daemon is killed at the run's end", p + '''
for (let i = 0; i < 3; i++)
  cp.spawn("/usr/bin/sleep", ["1000"], {detached: true, stdio: "ignore"}).unref();
R.started = 3;
done();
''', lambda out, r: clean(out) and r.get("started") == 3),
        ("processes", "process.kill(-1, 'SIGKILL') kills the run's own processes only", p + '''
const child = cp.spawn("/usr/bin/sleep", ["1000"], {stdio: "ignore"});
child.on("exit", (code, sig) => {
  R.child = sig;
  R.init = fs.existsSync("/proc/1/stat") ? "alive" : "gone";
  done();
});
setTimeout(() => { R.kill = attempt(() => process.kill(-1, "SIGKILL")); }, 300);
''', lambda out, r: clean(out) and r.get("kill") == "ok" and r.get("child") == "SIGKILL"
            and r.get("init") == "alive"),
        ("leaks", "the environment holds no server secret", p + f'''
R.keys = Object.keys(process.env).sort();
R.var = process.env.SBX_BREAKOUT_SECRET === undefined ? "unset" : "set";
R.leak = Object.values(process.env).some((v) => v.includes({json.dumps(secret)}));
R.environ = fs.readFileSync("/proc/self/environ", "latin1").includes({json.dumps(secret)});
done();
''', lambda out, r: r.get("var") == "unset" and r.get("leak") is False
            and r.get("environ") is False),
        ("leaks", "no host file or path of the server is visible", p + f'''
for (const h of {json.dumps(host)}) R[h] = attempt(() => fs.statSync(h));
R.hostname = os.hostname();
done();
''', lambda out, r: refused(r, host, ["ENOENT"]) and r.get("hostname") == "sandbox"),
        ("leaks", "/proc shows only the run", p + '''
R.pids = fs.readdirSync("/proc").filter((p) => /^[0-9]+$/.test(p)).map(Number)
  .sort((a, b) => a - b);
R.me = process.pid;
done();
''', lambda out, r: r.get("pids") == [1, r.get("me")]),
    ]


def test_node(bin_dir):
    run_runtime(bin_dir, "node", node_cases)
