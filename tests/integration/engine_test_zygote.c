/* engine_test_zygote.c: runs forked from zygotes (docs/ZYGOTE.md). An
 * engine without zygotes refuses a zygote run; with them (engine_zygote),
 * what a run gets fresh (namespaces, files, random seeds) and what it gets
 * like a cold run (identity, errors, peak memory), what a zygote's end
 * does to the next run, and two more engines: one recycling its zygotes
 * every two runs, one whose preload fails. Nothing one run of a zygote
 * does may be seen by the next. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine_test_common.h"
#include "killed_by.h"

/* ---- an engine without zygotes ---- */

static void test_zygote_refused_without_zygotes(void **state) {
  skip_in_zygote_mode("this engine has zygotes (engine_auto and engine_rlimit check the refusal)");
  char ws[WS_PATH];
  make_workspace(0, ws, sizeof ws);
  const char *argv[] = {PY, "-u", "/workspace/main.py", NULL};
  struct sandbox_spec spec = {.argv = argv, .workspace_dir = ws, .zygote = true};
  struct sandbox_result r;
  struct sandbox_error err = {0};
  assert_int_equal(sandbox_run(engine, 0, &spec, &r, &err), -1);
  assert_int_equal(err.errnum, EINVAL);
  assert_non_null(strstr(err.msg, "no zygotes"));
  assert_int_equal(sandbox_zygote_warm(engine, 0, &err), -1);
  assert_int_equal(err.errnum, EINVAL);
  struct sandbox_zygote_stats zs;
  sandbox_zygote_stats(engine, &zs);
  assert_int_equal(zs.running + zs.starts + zs.forks, 0);
  assert_false(sandbox_engine_report(engine)->zygote);
  remove_workspace(ws);
}

/* ---- zygotes: what is fresh per run, what a zygote's end does ---- */

/* Runs code as /workspace/main.py ("python3 -u"), cold or from the slot's
 * zygote, in a workspace of its own (ws: the caller's, or NULL). */
static void run_script_in(unsigned slot, enum run_kind kind, const char *code, const char *ws,
                          const struct sandbox_limits *l, struct run *out) {
  char own[WS_PATH];
  if (ws == NULL)
    ws = make_workspace(slot, own, sizeof own);
  char path[FILE_PATH];
  snprintf(path, sizeof path, "%s/main.py", ws);
  write_text(path, code, uid_base + slot);
  const char *argv[] = {PY, "-u", "/workspace/main.py", NULL};
  struct run_opts o = {.limits = l, .kind = kind, .workspace = ws};
  run_opts_in_slot(slot, argv, &o, out);
  if (ws == own)
    remove_workspace(own);
}

static void run_script(enum run_kind kind, const char *code, struct run *out) {
  run_script_in(0, kind, code, NULL, NULL, out);
}

/* Line i (from 0) of a run's stdout, in buf. */
static const char *stdout_line(const struct run *run, int i, char *buf, size_t size) {
  const char *p = (const char *)run->r.stdout_data, *end = p + run->r.stdout_len;
  for (; i > 0 && p < end; i--) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    p = nl != NULL ? nl + 1 : end;
  }
  const char *nl = memchr(p, '\n', (size_t)(end - p));
  size_t n = (size_t)((nl != NULL ? nl : end) - p);
  if (n >= size)
    n = size - 1;
  memcpy(buf, p, n);
  buf[n] = '\0';
  return buf;
}

/* The pid of slot's zygote from the cgroup that must hold it: on cgroup v1
 * its slot's (it lives there once its imports are charged to the zygotes'
 * cgroup, cgroup.h host_zygote), on v2 the zygotes'; 0 when it has none. */
static pid_t zygote_pid(unsigned slot) {
  struct uid_processes p = scan_uid_processes(uid_base + slot);
  if (p.zygotes == 0)
    return 0;
  assert_int_equal(p.zygotes, 1);
  char path[WS_PATH], line[32];
  const struct sandbox_report *rep = sandbox_engine_report(engine);
  if (rep->backend == SANDBOX_BACKEND_CGROUP_V1)
    snprintf(path, sizeof path, "%s/slot-%u/cgroup.procs", rep->cgroup_path, slot);
  else
    snprintf(path, sizeof path, "%s/zygotes/cgroup.procs", rep->cgroup_path);
  FILE *f = fopen(path, "re");
  assert_non_null(f);
  bool found = false;
  while (fgets(line, sizeof line, f) != NULL)
    found = found || atoi(line) == p.zygote;
  fclose(f);
  if (!found)
    fail_msg("zygote %d of slot %u is not in %s", (int)p.zygote, slot, path);
  return p.zygote;
}

/* Kills a zygote from outside and waits until it is gone. */
static void kill_and_wait(pid_t pid) {
  int fd = (int)syscall(SYS_pidfd_open, pid, 0);
  assert_true(fd >= 0);
  assert_int_equal(syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0), 0);
  struct pollfd p = {.fd = fd, .events = POLLIN};
  assert_int_equal(poll(&p, 1, 5000), 1);
  close(fd);
}

static struct sandbox_zygote_stats zygote_stats(void) {
  struct sandbox_zygote_stats zs;
  sandbox_zygote_stats(engine, &zs);
  return zs;
}

static void test_zygote_run_is_confined(void **state) {
  struct run run;
  run_script(RUN_ZYGOTE,
             "import os\n"
             "st = {}\n"
             "for l in open('/proc/self/status'):\n"
             "    k, _, v = l.partition(':'); st[k] = v.strip()\n"
             "print(*[st[k] for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb')])\n"
             "print(st['NoNewPrivs'], st['Seccomp'], repr(st['Groups']))\n"
             "print(*st['Uid'].split(), *st['Gid'].split())\n"
             "print(os.getpid(), os.getppid(), sorted(int(p) for p in os.listdir('/proc') "
             "if p.isdigit()))\n"
             /* PID 1 is the run's init (C code of the zygote), not the
              * program; its memory and root are out of reach. */
             "print(b'main.py' in open('/proc/1/cmdline', 'rb').read())\n"
             "for f in ('maps', 'environ', 'mem', 'root'):\n"
             "    try:\n"
             "        os.readlink('/proc/1/root') if f == 'root' else "
             "open('/proc/1/' + f, 'rb').read(1)\n"
             "        print(f, 'read')\n"
             "    except PermissionError:\n"
             "        print(f, 'refused')\n",
             &run);
  char want[512];
  unsigned u = (unsigned)uid_base;
  snprintf(want, sizeof want,
           "0000000000000000 0000000000000000 0000000000000000 0000000000000000 "
           "0000000000000000\n1 2 ''\n%u %u %u %u %u %u %u %u\n2 1 [1, 2]\nFalse\n"
           "maps refused\nenviron refused\nmem refused\nroot refused\n",
           u, u, u, u, u, u, u, u);
  assert_stdout(&run, want);
  sandbox_result_free(&run.r);
}

/* The namespaces a test compares, as /proc/PID/ns/ names them. */
static const char *const ns_names[] = {"pid", "mnt", "ipc", "uts", "cgroup", "net", "user"};
#define N_NS (sizeof ns_names / sizeof ns_names[0])

/* The namespaces of a run, held open while it runs (from its on_output):
 * a namespace's inode number is free for the next one once it is gone, so
 * runs one after the other are compared with namespaces kept alive. */
struct ns_hold {
  unsigned slot;
  int fd[N_NS];
  char name[N_NS][64]; /* "mnt:[4026532482]" */
};

static void ns_name_of(int fd, const char *ns, char *buf, size_t size) {
  struct stat st;
  assert_int_equal(fstat(fd, &st), 0);
  snprintf(buf, size, "%s:[%lu]", ns, (unsigned long)st.st_ino);
}

/* Opens the namespaces of pid (0: this process). */
static void ns_hold_pid(struct ns_hold *h, pid_t pid) {
  for (size_t i = 0; i < N_NS; i++) {
    char path[64];
    if (pid == 0)
      snprintf(path, sizeof path, "/proc/self/ns/%s", ns_names[i]);
    else
      snprintf(path, sizeof path, "/proc/%d/ns/%s", (int)pid, ns_names[i]);
    h->fd[i] = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(h->fd[i] >= 0);
    ns_name_of(h->fd[i], ns_names[i], h->name[i], sizeof h->name[i]);
  }
}

static void ns_release(struct ns_hold *h) {
  for (size_t i = 0; i < N_NS; i++)
    close(h->fd[i]);
}

/* The parent of pid, from /proc/PID/status; -1 when it is gone. */
static pid_t parent_of(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "re");
  int ppid = -1;
  while (f != NULL && fgets(line, sizeof line, f) != NULL && sscanf(line, "PPid:\t%d", &ppid) != 1)
    ;
  if (f != NULL)
    fclose(f);
  return (pid_t)ppid;
}

/* on_output of a run that prints its namespaces, then "hold", then waits:
 * opens the namespaces of a process of the run inside its namespaces (of
 * the slot's uid and not a child of this process, as a cold run's init or
 * the zygote are). */
static void ns_hold_collect(void *arg, int stream, const uint8_t *data, size_t len) {
  struct ns_hold *h = arg;
  if (stream != 1 || h->fd[0] >= 0 || memmem(data, len, "hold", 4) == NULL)
    return;
  DIR *d = opendir("/proc");
  struct dirent *de;
  pid_t pid = 0;
  while (pid == 0 && (de = readdir(d)) != NULL) {
    char path[64];
    struct stat st;
    snprintf(path, sizeof path, "/proc/%s", de->d_name);
    /* A /proc/PID directory is owned by the process's euid. */
    if (de->d_name[0] >= '1' && de->d_name[0] <= '9' && stat(path, &st) == 0 &&
        st.st_uid == uid_base + h->slot && parent_of((pid_t)atoi(de->d_name)) != getpid())
      pid = (pid_t)atoi(de->d_name);
  }
  closedir(d);
  assert_true(pid > 0);
  ns_hold_pid(h, pid);
}

/* Runs a script printing its namespace links, held open through the end. */
static void run_holding_ns(enum run_kind kind, struct ns_hold *h, struct run *out) {
  char ws[WS_PATH];
  make_script_workspace(0,
                        "import os, time\n"
                        "for ns in ['pid', 'mnt', 'ipc', 'uts', 'cgroup', 'net', 'user']:\n"
                        "    print(os.readlink('/proc/self/ns/' + ns))\n"
                        "print('hold', flush=True)\n"
                        "time.sleep(0.3)\n",
                        ws, sizeof ws);
  memset(h, 0, sizeof *h);
  for (size_t i = 0; i < N_NS; i++)
    h->fd[i] = -1;
  struct sandbox_stream st = {.on_output = ns_hold_collect, .arg = h, .cancel_fd = -1};
  const char *argv[] = {PY, "-u", "/workspace/main.py", NULL};
  struct run_opts o = {.stream = &st, .kind = kind, .workspace = ws};
  run_opts_in_slot(0, argv, &o, out);
  remove_workspace(ws);
  assert_int_equal(out->rc, 0);
  assert_true(h->fd[0] >= 0);
  /* What the program saw is what was held. */
  for (size_t i = 0; i < N_NS; i++) {
    char line[128];
    assert_string_equal(stdout_line(out, (int)i, line, sizeof line), h->name[i]);
  }
}

static void test_zygote_namespaces_fresh_per_run(void **state) {
  struct ns_hold z1, z2, cold, host, zygote;
  struct run r1, r2, rc;
  warm_zygotes();
  ns_hold_pid(&zygote, zygote_pid(0));
  ns_hold_pid(&host, 0);
  run_holding_ns(RUN_ZYGOTE, &z1, &r1);
  run_holding_ns(RUN_COLD, &cold, &rc);
  run_holding_ns(RUN_ZYGOTE, &z2, &r2);
  for (size_t i = 0; i < N_NS; i++) {
    const char *ns = ns_names[i];
    fprintf(stderr, "# %-6s host %s, zygote %s, its runs %s %s, cold %s\n", ns, host.name[i],
            zygote.name[i], z1.name[i], z2.name[i], cold.name[i]);
    assert_string_not_equal(z1.name[i], host.name[i]);
    assert_string_not_equal(z2.name[i], host.name[i]);
    if (strcmp(ns, "net") == 0) {
      /* The slot's network namespace, as for a cold run of the slot. */
      assert_string_equal(z1.name[i], cold.name[i]);
      assert_string_equal(z2.name[i], cold.name[i]);
      assert_string_equal(zygote.name[i], cold.name[i]);
    } else if (strcmp(ns, "user") == 0) {
      /* Fresh per run, inside the zygote's (both map only the slot's ids:
       * the zygote holds no capability, its runs' namespaces are made by
       * their own user namespace); a cold run has none. */
      assert_string_not_equal(z1.name[i], z2.name[i]);
      assert_string_not_equal(z1.name[i], zygote.name[i]);
      assert_string_not_equal(z2.name[i], zygote.name[i]);
      assert_string_equal(cold.name[i], host.name[i]);
    } else {
      /* Fresh per run: not the zygote's, not the last run's. */
      assert_string_not_equal(z1.name[i], z2.name[i]);
      assert_string_not_equal(z1.name[i], zygote.name[i]);
      assert_string_not_equal(z2.name[i], zygote.name[i]);
      assert_string_not_equal(z2.name[i], cold.name[i]);
    }
  }
  struct ns_hold *all[] = {&z1, &z2, &cold, &host, &zygote};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    ns_release(all[i]);
  sandbox_result_free(&r1.r);
  sandbox_result_free(&r2.r);
  sandbox_result_free(&rc.r);
}

static void test_zygote_nothing_carries_over(void **state) {
  /* A file the zygote's own /workspace holds (the engine's zygote-home). */
  char secret[FILE_PATH];
  snprintf(secret, sizeof secret, "%s/zygote-home/zygote-secret", state_dir);
  warm_zygotes();
  write_text(secret, "the zygote's\n", 0);
  uint64_t starts = zygote_stats().starts;
  static const char ipc[] = "import ctypes\n"
                            "libc = ctypes.CDLL(None, use_errno=True)\n"
                            "shmget = lambda flags: libc.shmget(0x5b0c, 4096, flags)\n";
  char code1[1024], code2[1024];
  snprintf(code1, sizeof code1,
           "%sprint(shmget(0o1600) >= 0)\n" /* IPC_CREAT | 0600 */
           "open('/tmp/carry', 'w').write('1'); open('/dev/shm/carry', 'w').write('1')\n"
           "open('/workspace/carry', 'w').write('1')\n"
           "import sys; sys.modules['json'] = 'tampered'\n"
           "print(sorted(__import__('os').listdir('/workspace')))\n",
           ipc);
  snprintf(code2, sizeof code2,
           "%sprint(shmget(0), ctypes.get_errno() == 2)\n" /* ENOENT */
           "import os, sys\n"
           "print(os.listdir('/tmp'), os.listdir('/dev/shm'), sorted(os.listdir('/workspace')))\n"
           "print(os.path.exists('/workspace/zygote-secret'), sys.modules.get('json') == "
           "'tampered')\n",
           ipc);
  char ws2[WS_PATH], mine[FILE_PATH];
  make_workspace(0, ws2, sizeof ws2);
  snprintf(mine, sizeof mine, "%s/mine", ws2);
  write_text(mine, "", uid_base);
  struct run r1, r2;
  run_script(RUN_ZYGOTE, code1, &r1);
  run_script_in(0, RUN_ZYGOTE, code2, ws2, NULL, &r2);
  remove_workspace(ws2);
  unlink(secret);
  assert_stdout(&r1, "True\n['carry', 'main.py']\n");
  assert_stdout(&r2, "-1 True\n[] [] ['main.py', 'mine']\nFalse False\n");
  /* Both from the same zygote: what one run did stayed in its own. */
  assert_int_equal(zygote_stats().starts, starts);
  sandbox_result_free(&r1.r);
  sandbox_result_free(&r2.r);
}

static void test_zygote_reseeds_random(void **state) {
  const char *code = "import random, numpy, ctypes\n"
                     "print(random.random(), random.getrandbits(64))\n"
                     "print(numpy.random.random(), numpy.random.randint(1 << 62))\n"
                     "print(hash('sandbox'))\n"
                     "print(hex(ctypes.cast(ctypes.CDLL(None).printf, ctypes.c_void_p).value))\n";
  struct run r1, r2;
  run_script(RUN_ZYGOTE, code, &r1);
  run_script(RUN_ZYGOTE, code, &r2);
  char a[128], b[128];
  for (int i = 0; i < 2; i++)
    if (strcmp(stdout_line(&r1, i, a, sizeof a), stdout_line(&r2, i, b, sizeof b)) == 0)
      fail_msg("two runs of a zygote drew the same numbers: %s", a);
  /* What forks of one process share, and cannot be told apart from here:
   * the str hash secret and the address-space layout (docs/ZYGOTE.md). */
  fprintf(stderr, "# the runs of one zygote share the str hash secret: %s, libc's address: %s\n",
          strcmp(stdout_line(&r1, 2, a, sizeof a), stdout_line(&r2, 2, b, sizeof b)) == 0 ? "yes"
                                                                                          : "no",
          strcmp(stdout_line(&r1, 3, a, sizeof a), stdout_line(&r2, 3, b, sizeof b)) == 0 ? "yes"
                                                                                          : "no");
  sandbox_result_free(&r1.r);
  sandbox_result_free(&r2.r);
}

static void test_zygote_identity_like_cold(void **state) {
  const char *code =
      "import os, pwd, grp, sys\n"
      "print(os.getresuid(), os.getresgid(), os.getgroups())\n"
      "print(pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name)\n"
      "print(os.getcwd(), sorted(os.environ.items()))\n"
      "print(sys.argv, sys.path[0], __file__, __name__)\n"
      "import resource\n"
      "print([resource.getrlimit(getattr(resource, 'RLIMIT_' + r)) for r in\n"
      "       ('CORE', 'NOFILE', 'FSIZE', 'STACK')])\n"
      "print(os.umask(0o22), open('/proc/self/status').read().count('\\nSeccomp:\\t2'))\n";
  struct run cold, z;
  run_script(RUN_COLD, code, &cold);
  run_script(RUN_ZYGOTE, code, &z);
  assert_int_equal(cold.rc, 0);
  fprintf(stderr, "# %.*s", (int)cold.r.stdout_len, (const char *)cold.r.stdout_data);
  char *want = strndup((const char *)cold.r.stdout_data, cold.r.stdout_len);
  assert_stdout(&z, want);
  free(want);
  sandbox_result_free(&cold.r);
  sandbox_result_free(&z.r);
}

static int compare_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, size_t n) {
  qsort(v, n, sizeof *v, compare_u64);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void test_zygote_peak_memory_like_cold(void **state) {
  /* 60 MiB touched: the run's peak counts it whichever way it started. */
  const char *code = "b = bytearray(60 * 2**20); print(len(b))";
  uint64_t cold[3], z[3];
  for (int i = 0; i < 3; i++) {
    struct run rc, rz;
    run_script(RUN_COLD, code, &rc);
    run_script(RUN_ZYGOTE, code, &rz);
    assert_stdout(&rc, "62914560\n");
    assert_stdout(&rz, "62914560\n");
    cold[i] = rc.r.peak_memory_bytes;
    z[i] = rz.r.peak_memory_bytes;
    sandbox_result_free(&rc.r);
    sandbox_result_free(&rz.r);
  }
  double c = (double)median(cold, 3), m = (double)median(z, 3);
  fprintf(stderr, "# peak memory of a 60 MiB run: cold %.1f MiB, zygote %.1f MiB (ratio %.2f)\n",
          c / 1048576, m / 1048576, m / c);
  assert_true(m >= 60.0 * 1048576);
  assert_true(m >= c * 0.8 && m <= c * 1.2);
}

static void test_zygote_oom_kills_the_run_not_the_zygote(void **state) {
  warm_zygotes();
  pid_t zygote = zygote_pid(0);
  uint64_t starts = zygote_stats().starts;
  struct sandbox_limits l = {.memory_bytes = 64u << 20};
  struct run run;
  run_script_in(0, RUN_ZYGOTE, "chunks = []\nwhile True: chunks.append(bytearray(8 << 20))\n", NULL,
                &l, &run);
  assert_int_equal(run.rc, 0);
  assert_int_equal(run.r.killed_by, SANDBOX_KILLED_BY_MEMORY);
  assert_int_equal(run.r.signal, SIGKILL);
  assert_true(run.r.peak_memory_bytes <= 64u << 20);
  sandbox_result_free(&run.r);
  /* The zygote (charged to its own cgroup) lives on and serves the next. */
  assert_int_equal(zygote_pid(0), zygote);
  run_script(RUN_ZYGOTE, "print('after')", &run);
  assert_stdout(&run, "after\n");
  assert_int_equal(zygote_stats().starts, starts);
  sandbox_result_free(&run.r);
}

static void test_zygote_killed_from_outside_is_replaced(void **state) {
  warm_zygotes();
  pid_t old = zygote_pid(0);
  assert_true(old > 0);
  struct sandbox_zygote_stats before = zygote_stats();
  kill_and_wait(old);
  struct run run;
  run_script(RUN_ZYGOTE, "print('fresh')", &run);
  assert_stdout(&run, "fresh\n");
  sandbox_result_free(&run.r);
  pid_t now = zygote_pid(0);
  assert_true(now > 0 && now != old);
  assert_int_equal(zygote_stats().starts, before.starts + 1);
}

static void test_zygote_killed_during_a_run(void **state) {
  /* The zygote dies while a run of its is under way (killed from outside
   * when the run has printed): the run's namespace goes with it, the run
   * ends at once, with an error or killed, and the next run gets a fresh
   * zygote. */
  warm_zygotes();
  struct stream_log log = {.cancel_fd = -1, .kill_pid = zygote_pid(0), .kill_on = "up"};
  struct sandbox_stream st = {.on_output = stream_collect, .arg = &log, .cancel_fd = -1};
  char ws[WS_PATH];
  make_script_workspace(0,
                        "import os, time\n"
                        "if os.fork() == 0:\n    time.sleep(60)\n"
                        "print('up', flush=True)\ntime.sleep(60)\n",
                        ws, sizeof ws);
  const char *argv[] = {PY, "-u", "/workspace/main.py", NULL};
  struct sandbox_limits l = {.timeout_ms = scaled_ms(20000)};
  struct run_opts o = {.stream = &st, .limits = &l, .kind = RUN_ZYGOTE, .workspace = ws};
  struct run run;
  clock_gettime(CLOCK_MONOTONIC, &log.start);
  run_opts_in_slot(0, argv, &o, &run);
  double took = ms_since(&log.start);
  remove_workspace(ws);
  assert_null(log.kill_on); /* the zygote was killed */
  fprintf(stderr, "# the run ended %.0f ms after it started: %s\n", took,
          run.rc < 0 ? run.err.msg : killed_by_name(run.r.killed_by));
  assert_true(took < scaled_ms(5000));
  if (run.rc == 0) {
    assert_int_equal(run.r.signal, SIGKILL);
    sandbox_result_free(&run.r);
  }
  uint64_t starts = zygote_stats().starts;
  run_script(RUN_ZYGOTE, "print('next')", &run);
  assert_stdout(&run, "next\n");
  assert_int_equal(zygote_stats().starts, starts + 1);
  sandbox_result_free(&run.r);
}

static void test_zygote_refuses_what_it_cannot_run(void **state) {
  warm_zygotes();
  pid_t zygote = zygote_pid(0);
  struct sandbox_zygote_stats before = zygote_stats();
  char ws[WS_PATH];
  make_workspace(0, ws, sizeof ws);
  static const char *const sh[] = {"/bin/sh", "-c", "echo hi", NULL};
  static const char *const dash_c[] = {PY, "-c", "print(1)", NULL};
  static const char *const isolated[] = {PY, "-I", "/workspace/main.py", NULL};
  static const char *const relative[] = {PY, "main.py", NULL};
  static const char *const bare[] = {PY, NULL};
  static const char *const other_python[] = {"/usr/bin/python3.11", "/workspace/main.py", NULL};
  static const char *const script[] = {PY, "-u", "/workspace/main.py", NULL};
  const struct {
    const char *const *argv;
    const char *says;
  } cases[] = {{sh, "/usr/bin/python3 only"}, {dash_c, "SCRIPT"}, {isolated, "SCRIPT"},
               {relative, "SCRIPT"},          {bare, "SCRIPT"},   {other_python, "python3 only"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct sandbox_spec spec = {.argv = cases[i].argv, .workspace_dir = ws, .zygote = true};
    struct sandbox_result r;
    struct sandbox_error err = {0};
    assert_int_equal(sandbox_run(engine, 0, &spec, &r, &err), -1);
    fprintf(stderr, "# %s ...: %s\n", cases[i].argv[0], err.msg);
    assert_int_equal(err.errnum, EINVAL);
    assert_non_null(strstr(err.msg, cases[i].says));
  }
  /* Never with the network profile, never with extra mounts outside /usr/. */
  struct sandbox_error err = {0};
  int inner = -1;
  int ns = sandbox_netns_create(0, &inner, &err);
  assert_true(ns >= 0);
  struct sandbox_spec net = {
      .argv = script, .workspace_dir = ws, .zygote = true, .network = true, .netns_fd = ns};
  struct sandbox_result r;
  assert_int_equal(sandbox_run(engine, 0, &net, &r, &err), -1);
  assert_int_equal(err.errnum, EINVAL);
  assert_non_null(strstr(err.msg, "network"));
  close(inner);
  close(ns);
  /* An extra mount outside /usr/, or under it but not a directory there,
   * or with a source that is not one. */
  static const struct sandbox_mount bad_mounts[] = {
      {.source = "/usr/share", .target = "/opt/share"},
      {.source = "/usr/share", .target = "/usr/local/lib/no-such-dir"},
      {.source = "/no/such/source", .target = "/usr/local/lib/python3.11/dist-packages"},
  };
  for (size_t i = 0; i < sizeof bad_mounts / sizeof bad_mounts[0]; i++) {
    struct sandbox_spec mounted = {.argv = script,
                                   .workspace_dir = ws,
                                   .zygote = true,
                                   .mounts = &bad_mounts[i],
                                   .n_mounts = 1};
    assert_int_equal(sandbox_run(engine, 0, &mounted, &r, &err), -1);
    fprintf(stderr, "# mount %s on %s: %s\n", bad_mounts[i].source, bad_mounts[i].target, err.msg);
    assert_true(err.errnum == EINVAL || err.errnum == ENOENT);
  }
  remove_workspace(ws);
  /* Refused before the zygote was asked: it is the same one, nothing was
   * forked, started or recycled. */
  struct sandbox_zygote_stats after = zygote_stats();
  assert_int_equal(zygote_pid(0), zygote);
  assert_int_equal(after.starts, before.starts);
  assert_int_equal(after.start_failures, before.start_failures);
  assert_int_equal(after.recycled, before.recycled);
  assert_int_equal(after.forks, before.forks);
}

static void test_zygote_missing_script_like_cold(void **state) {
  char ws[WS_PATH];
  make_workspace(0, ws, sizeof ws);
  const char *argv[] = {PY, "-u", "/workspace/missing.py", NULL};
  struct run cold, z;
  struct run_opts oc = {.kind = RUN_COLD, .workspace = ws};
  struct run_opts oz = {.kind = RUN_ZYGOTE, .workspace = ws};
  run_opts_in_slot(0, argv, &oc, &cold);
  run_opts_in_slot(0, argv, &oz, &z);
  remove_workspace(ws);
  assert_int_equal(cold.rc, 0);
  assert_int_equal(z.rc, 0);
  fprintf(stderr, "# cold: exit %d, %.*s# zygote: exit %d, %.*s", cold.r.exit_code,
          (int)cold.r.stderr_len, (const char *)cold.r.stderr_data, z.r.exit_code,
          (int)z.r.stderr_len, (const char *)z.r.stderr_data);
  assert_int_equal(cold.r.exit_code, 2);
  assert_int_equal(z.r.exit_code, cold.r.exit_code);
  assert_int_equal(z.r.stderr_len, cold.r.stderr_len);
  assert_memory_equal(z.r.stderr_data, cold.r.stderr_data, cold.r.stderr_len);
  sandbox_result_free(&cold.r);
  sandbox_result_free(&z.r);
}

static void test_zygote_errors_like_cold(void **state) {
  /* What the user sees of an error: the same traceback (none of the
   * zygote's own frames), exit status and signal as from python3. */
  static const char *const programs[] = {
      "def f():\n    raise ValueError('boom')\nprint('before')\nf()\n",
      "print('a'\n",
      "import json\njson.loads('{')\n",
      "import sys\nsys.exit('a message')\n",
      "import sys\nsys.exit(7)\n",
      "raise KeyboardInterrupt\n",
      "raise SystemExit\n",
  };
  for (size_t i = 0; i < sizeof programs / sizeof programs[0]; i++) {
    struct run cold, z;
    run_script(RUN_COLD, programs[i], &cold);
    run_script(RUN_ZYGOTE, programs[i], &z);
    assert_int_equal(cold.rc, 0);
    assert_int_equal(z.rc, 0);
    if (z.r.exit_code != cold.r.exit_code || z.r.signal != cold.r.signal ||
        z.r.stderr_len != cold.r.stderr_len ||
        (cold.r.stderr_len > 0 &&
         memcmp(z.r.stderr_data, cold.r.stderr_data, cold.r.stderr_len) != 0) ||
        z.r.stdout_len != cold.r.stdout_len)
      fail_msg("program %zu: cold exit %d signal %d:\n%.*s\nzygote exit %d signal %d:\n%.*s", i,
               cold.r.exit_code, cold.r.signal, (int)cold.r.stderr_len,
               (const char *)cold.r.stderr_data, z.r.exit_code, z.r.signal, (int)z.r.stderr_len,
               (const char *)z.r.stderr_data);
    sandbox_result_free(&cold.r);
    sandbox_result_free(&z.r);
  }
}

static void test_zygote_stats_count_runs(void **state) {
  warm_zygotes();
  struct sandbox_zygote_stats before = zygote_stats();
  for (int i = 0; i < 3; i++) {
    struct run run;
    run_script(RUN_ZYGOTE, "print('x')", &run);
    assert_stdout(&run, "x\n");
    sandbox_result_free(&run.r);
  }
  struct sandbox_zygote_stats after = zygote_stats();
  fprintf(stderr,
          "# zygotes: %u running, %.1f MiB charged to their cgroup, %llu starts, %llu forks, "
          "%llu recycled, %llu failed starts\n",
          after.running, after.memory_bytes / 1048576.0, (unsigned long long)after.starts,
          (unsigned long long)after.forks, (unsigned long long)after.recycled,
          (unsigned long long)after.start_failures);
  assert_int_equal(after.forks, before.forks + 3);
  assert_int_equal(after.starts, before.starts);
  assert_int_equal(after.running, SLOTS);
  assert_true(after.have_memory);
  assert_true(after.memory_bytes > (10u << 20)); /* numpy and matplotlib */
}

static void test_zygote_hello_world_timing(void **state) {
  /* Cold and zygote runs of the same script, interleaved; printed, not
   * asserted (a shared machine's figures vary). */
  enum { N = 21 };
  uint64_t wall[2][N], total[2][N], cpu[2][N];
  warm_zygotes();
  char ws[WS_PATH];
  make_script_workspace(0, "print('hello world')\n", ws, sizeof ws);
  for (int i = 0; i < N; i++) {
    for (int k = 0; k < 2; k++) {
      const char *argv[] = {PY, "-u", "/workspace/main.py", NULL};
      struct sandbox_spec spec = {.argv = argv, .workspace_dir = ws, .zygote = k == 1};
      struct sandbox_result r;
      struct sandbox_error err = {0};
      struct timespec t0;
      clock_gettime(CLOCK_MONOTONIC, &t0);
      assert_int_equal(sandbox_run(engine, 0, &spec, &r, &err), 0);
      total[k][i] = (uint64_t)(ms_since(&t0) * 1000);
      assert_int_equal(r.stdout_len, 12);
      wall[k][i] = r.wall_time_us;
      cpu[k][i] = r.cpu_time_us;
      sandbox_result_free(&r);
    }
  }
  remove_workspace(ws);
  uint64_t wc = median(wall[0], N), wz = median(wall[1], N);
  uint64_t tc = median(total[0], N), tz = median(total[1], N);
  uint64_t cc = median(cpu[0], N), cz = median(cpu[1], N);
  fprintf(stderr,
          "# hello world, median of %d interleaved runs each: wall_time cold %.2f ms, zygote %.2f "
          "ms (ratio %.2f); sandbox_run cold %.2f ms, zygote %.2f ms (ratio %.2f); cpu_time cold "
          "%.2f ms, zygote %.2f ms\n",
          N, wc / 1e3, wz / 1e3, (double)wz / (double)wc, tc / 1e3, tz / 1e3,
          (double)tz / (double)tc, cc / 1e3, cz / 1e3);
}

/* ---- an engine whose zygotes are recycled every two runs ---- */

int group_setup_recycle(void **state) {
  zygote_config = (struct sandbox_zygote_config){
      .enabled = true, .preload = "json", .max_forks = 2, .max_age_ms = scaled_ms(1500)};
  return engine_start();
}

static void test_zygote_recycled_after_max_forks(void **state) {
  pid_t seen[5];
  for (int i = 0; i < 5; i++) {
    struct run run;
    run_script(RUN_ZYGOTE, "print('r')", &run);
    assert_stdout(&run, "r\n");
    sandbox_result_free(&run.r);
    seen[i] = zygote_pid(0);
    if (i > 0 && i % 2 == 0) /* the one before is gone */
      assert_int_equal(scan_uid_processes(uid_base).zygotes, 1);
  }
  assert_int_equal(seen[0], seen[1]);
  assert_int_equal(seen[2], seen[3]);
  assert_true(seen[1] != seen[2] && seen[3] != seen[4]);
  struct sandbox_zygote_stats zs = zygote_stats();
  assert_int_equal(zs.starts, 3);
  assert_int_equal(zs.recycled, 2);
  assert_int_equal(zs.forks, 5);
}

static void test_zygote_recycled_after_max_age(void **state) {
  struct run run;
  run_script(RUN_ZYGOTE, "print('r')", &run); /* a fresh zygote: the last served two */
  sandbox_result_free(&run.r);
  pid_t first = zygote_pid(0);
  struct sandbox_zygote_stats before = zygote_stats();
  usleep((useconds_t)scaled_ms(1600) * 1000);
  run_script(RUN_ZYGOTE, "print('r')", &run);
  assert_stdout(&run, "r\n");
  sandbox_result_free(&run.r);
  assert_true(zygote_pid(0) != first);
  struct sandbox_zygote_stats after = zygote_stats();
  assert_int_equal(after.starts, before.starts + 1);
  assert_int_equal(after.recycled, before.recycled + 1);
}

/* ---- an engine whose zygotes cannot start ---- */

int group_setup_bad_preload(void **state) {
  zygote_config =
      (struct sandbox_zygote_config){.enabled = true, .preload = "json,sbx_no_such_module"};
  return engine_start();
}

static void test_zygote_bad_preload_fails_the_run(void **state) {
  char ws[WS_PATH];
  make_script_workspace(0, "print('ran')\n", ws, sizeof ws);
  const char *argv[] = {PY, "-u", "/workspace/main.py", NULL};
  struct sandbox_spec spec = {.argv = argv, .workspace_dir = ws, .zygote = true};
  struct sandbox_result r;
  struct sandbox_error err = {0};
  assert_int_equal(sandbox_run(engine, 0, &spec, &r, &err), -1);
  fprintf(stderr, "# %s\n", err.msg);
  assert_non_null(strstr(err.msg, "sbx_no_such_module"));
  /* What went wrong, within the message's first line (it is cut at 511). */
  assert_non_null(strstr(err.msg, "No module named 'sbx_no_such_module'"));
  assert_true(strstr(err.msg, "No module named") < strchr(err.msg, '\n'));
  /* Asked again at once: the same failure, without another start (a
   * failed start is retried after 10 s). */
  assert_int_equal(sandbox_zygote_warm(engine, 0, &err), -1);
  assert_non_null(strstr(err.msg, "sbx_no_such_module"));
  assert_non_null(strstr(err.msg, "ms ago; tried again 10 s after"));
  struct sandbox_zygote_stats zs = zygote_stats();
  assert_int_equal(zs.running, 0);
  assert_int_equal(zs.starts, 0);
  assert_int_equal(zs.start_failures, 1);
  struct uid_processes left = scan_uid_processes(uid_base);
  assert_int_equal(left.others + left.zygotes, 0);
  /* Cold runs are not affected. */
  spec.zygote = false;
  assert_int_equal(sandbox_run(engine, 0, &spec, &r, &err), 0);
  assert_int_equal(r.stdout_len, 4);
  assert_memory_equal(r.stdout_data, "ran\n", 4);
  sandbox_result_free(&r);
  remove_workspace(ws);
}

static const struct CMUnitTest off_tests[] = {
    cmocka_unit_test_setup(test_zygote_refused_without_zygotes, test_setup),
};
const struct engine_tests engine_zygote_off_tests = ENGINE_TESTS(off_tests);

static const struct CMUnitTest zygote_tests[] = {
    cmocka_unit_test_setup(test_zygote_run_is_confined, test_setup),
    cmocka_unit_test_setup(test_zygote_namespaces_fresh_per_run, test_setup),
    cmocka_unit_test_setup(test_zygote_nothing_carries_over, test_setup),
    cmocka_unit_test_setup(test_zygote_reseeds_random, test_setup),
    cmocka_unit_test_setup(test_zygote_identity_like_cold, test_setup),
    cmocka_unit_test_setup(test_zygote_peak_memory_like_cold, test_setup),
    cmocka_unit_test_setup(test_zygote_oom_kills_the_run_not_the_zygote, test_setup),
    cmocka_unit_test_setup(test_zygote_killed_from_outside_is_replaced, test_setup),
    cmocka_unit_test_setup(test_zygote_killed_during_a_run, test_setup),
    cmocka_unit_test_setup(test_zygote_refuses_what_it_cannot_run, test_setup),
    cmocka_unit_test_setup(test_zygote_missing_script_like_cold, test_setup),
    cmocka_unit_test_setup(test_zygote_errors_like_cold, test_setup),
    cmocka_unit_test_setup(test_zygote_stats_count_runs, test_setup),
    cmocka_unit_test_setup(test_zygote_hello_world_timing, test_setup),
};
const struct engine_tests engine_zygote_tests = ENGINE_TESTS(zygote_tests);

static const struct CMUnitTest recycle_tests[] = {
    cmocka_unit_test_setup(test_zygote_recycled_after_max_forks, test_setup),
    cmocka_unit_test_setup(test_zygote_recycled_after_max_age, test_setup),
};
const struct engine_tests engine_zygote_recycle_tests = ENGINE_TESTS(recycle_tests);

static const struct CMUnitTest bad_preload_tests[] = {
    cmocka_unit_test_setup(test_zygote_bad_preload_fails_the_run, test_setup),
};
const struct engine_tests engine_zygote_bad_preload_tests = ENGINE_TESTS(bad_preload_tests);
