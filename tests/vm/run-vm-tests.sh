#!/usr/bin/env bash
# run-vm-tests.sh BUILD_DIR: proves the cgroup v2 backend on a real cgroup v2
# kernel. Boots Debian's own cloud kernel (linux-image-cloud-amd64, fetched
# with apt-get download and unpacked with dpkg -x, never installed) under
# qemu with an initramfs holding busybox, /usr/bin/python3 and its standard
# library, Debian's pip, the built binaries and their libraries (the
# zygote's libpython too), and the hostile-.pth wheel of
# tests/lib/hostile_package.py; tests/vm/init mounts cgroup2 and runs
# tests/vm/suite.sh. The VM writes one "VMTEST <name> PASS|FAIL" line per
# check to its second serial port; this script passes
# only when every line says PASS, the summary agrees, the required checks are
# all there and the VM powered off in time. Otherwise it fails and prints the
# VM's console.
#
# Environment: SANDBOXD_VM_TIMEOUT (seconds, default 600),
# SANDBOXD_VM_CACHE (kernel cache, default BUILD_DIR/vm-cache),
# SANDBOXD_VM_TIME_SCALE (engine_test's SANDBOX_TEST_TIME_SCALE in the VM,
# default 4 under TCG, 2 under KVM), SANDBOXD_VM_ACCEL (kvm or tcg: skip the probe).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: run-vm-tests.sh BUILD_DIR}" && pwd)
bindir=$build/bin
timeout_s=${SANDBOXD_VM_TIMEOUT:-600}
cache=${SANDBOXD_VM_CACHE:-$build/vm-cache}
work=$build/vm
t0=$(date +%s)

log() { echo "vm-test: $*" >&2; }
die() {
  log "FAIL: $*"
  exit 1
}

# ---- host tools ----
need_pkgs=()
for p in qemu-system-x86 busybox-static cpio util-linux; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need_pkgs+=("$p")
done
if [ "${#need_pkgs[@]}" -gt 0 ]; then
  log "installing ${need_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${need_pkgs[@]}" >&2 ||
    { apt-get update -q >&2 && apt-get install -y -q --no-install-recommends "${need_pkgs[@]}" >&2; } ||
    die "cannot install ${need_pkgs[*]}"
fi

# ---- kernel: Debian's cloud kernel, cached ----
mkdir -p "$cache"
kernel=$(ls "$cache"/kernel/boot/vmlinuz-* 2>/dev/null | head -n 1 || true)
if [ -z "$kernel" ]; then
  meta=linux-image-cloud-amd64
  pkg=$(apt-cache depends "$meta" 2>/dev/null | awk '$1 == "Depends:" && $2 ~ /^linux-image-/ { print $2; exit }')
  if [ -z "$pkg" ]; then
    apt-get update -q >&2 || true
    pkg=$(apt-cache depends "$meta" | awk '$1 == "Depends:" && $2 ~ /^linux-image-/ { print $2; exit }')
  fi
  [ -n "$pkg" ] || die "apt knows no kernel package behind $meta"
  log "downloading $pkg"
  rm -rf "$cache/dl" "$cache/kernel.tmp"
  mkdir -p "$cache/dl"
  # _apt cannot write into a root-owned build tree: say so quietly.
  (cd "$cache/dl" && apt-get download "$pkg" 2>&1 | grep -v 'unsandboxed' >&2) || true
  deb=$(ls "$cache"/dl/"$pkg"_*.deb 2>/dev/null | head -n 1 || true)
  [ -n "$deb" ] || die "apt-get download $pkg produced no .deb"
  dpkg -x "$deb" "$cache/kernel.tmp"
  rm -f "$deb"
  mv "$cache/kernel.tmp" "$cache/kernel"
  kernel=$(ls "$cache"/kernel/boot/vmlinuz-* | head -n 1)
fi
log "kernel $kernel"

# ---- initramfs ----
root=$work/rootfs
rm -rf "$work"
mkdir -p "$root"/{usr/bin,usr/sbin,usr/lib,usr/lib64,etc,proc,sys,dev,tmp,run,root,vmtest,opt/sandboxd/bin,var/lib}
ln -s usr/bin "$root/bin"
ln -s usr/sbin "$root/sbin"
ln -s usr/lib "$root/lib"
ln -s usr/lib64 "$root/lib64"

# Copies a file to the same path in the image (through the merged-/usr links).
put() {
  local src=$1 dst=${2:-$1}
  mkdir -p "$root$(dirname "$dst")"
  cp -L "$src" "$root$dst"
}
# Copies the shared libraries a binary or module needs, as ldd resolves them.
put_libs() {
  local f lib
  for f in "$@"; do
    # A module with no dependencies of its own prints no path: not an error.
    for lib in $(ldd "$f" 2>/dev/null | grep -o '/[^ ]*' || true); do
      [ -e "$root$lib" ] || put "$lib"
    done
  done
}

cp /bin/busybox "$root/usr/bin/busybox"
for applet in $("$root/usr/bin/busybox" --list); do
  [ -e "$root/usr/bin/$applet" ] || ln -s busybox "$root/usr/bin/$applet"
done
# util-linux unshare: busybox's cannot make a cgroup namespace.
rm -f "$root/usr/bin/unshare"
put /usr/bin/unshare
put_libs /usr/bin/unshare

pyver=$(readlink -f /usr/bin/python3)
put "$pyver"
ln -s "$(basename "$pyver")" "$root/usr/bin/python3"
put_libs "$pyver"
pylib=/usr/lib/$(basename "$pyver")
tar -C / -cf - \
  --exclude="${pylib#/}/test" --exclude="${pylib#/}/idlelib" --exclude="${pylib#/}/tkinter" \
  --exclude="${pylib#/}/turtledemo" --exclude="${pylib#/}/ensurepip" \
  --exclude="${pylib#/}/pydoc_data" --exclude="${pylib#/}/lib2to3" \
  --exclude="${pylib#/}/distutils" --exclude="${pylib#/}/config-*" \
  --exclude='*/tests' --exclude='*.opt-1.pyc' --exclude='*.opt-2.pyc' \
  --exclude='*/lib-dynload/_tkinter*' \
  "${pylib#/}" | tar -C "$root" -xf -
put_libs "$pylib"/lib-dynload/*.so
# The site directories as Debian lays them out (empty): the requirements
# store mounts packages over the /usr/local one, which must exist.
for d in "/usr/local/lib/$(basename "$pyver")/dist-packages" /usr/lib/python3/dist-packages; do
  [ -d "$d" ] && mkdir -p "$root$d"
done

# pip, for the requirements the server installs in a sandbox (Debian's
# python3-pip, its dependencies vendored), with its __pycache__: /usr is
# read-only in a run, so pip would otherwise compile what it imports at
# every install.
pipdir=/usr/lib/python3/dist-packages/pip
if [ -d "$pipdir" ]; then
  tar -C / -cf - "${pipdir#/}" | tar -C "$root" -xf -
else
  log "no $pipdir (python3-pip): the package-code checks will fail in the VM"
fi

missing=()
for b in engine_test sandbox-exec sandboxd sandbox-run; do
  if [ -x "$bindir/$b" ]; then
    strip --strip-debug -o "$root/opt/sandboxd/bin/$b" "$bindir/$b" 2>/dev/null ||
      cp "$bindir/$b" "$root/opt/sandboxd/bin/"
    put_libs "$bindir/$b"
  else
    missing+=("$b")
  fi
done
# The zygote is carried inside sandboxd and exec'd from a memfd: only its
# libraries (libpython) go into the image.
if [ -x "$bindir/sandbox-zygote" ]; then
  put_libs "$bindir/sandbox-zygote"
else
  missing+=(sandbox-zygote)
fi
[ "${#missing[@]}" -eq 0 ] || log "not built (their checks will fail in the VM): ${missing[*]}"

# /etc: the loader's cache for the copied libraries, and a root user.
cp -a /etc/ld.so.conf "$root/etc/"
[ -d /etc/ld.so.conf.d ] && cp -a /etc/ld.so.conf.d "$root/etc/"
ldconfig -r "$root"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
printf '127.0.0.1 localhost\n::1 localhost\n' >"$root/etc/hosts"
printf 'hosts: files\npasswd: files\ngroup: files\n' >"$root/etc/nsswitch.conf"
for f in /etc/localtime /etc/mime.types; do [ -e "$f" ] && cp -L "$f" "$root$f"; done

# ---- accelerator: KVM only if it really runs a guest ----
# On some hosts /dev/kvm opens and qemu starts, but the guest never gets past
# the firmware. So the probe boots the kernel with no root: under working KVM
# it panics (and qemu exits, -no-reboot) within a second or two.
accel=${SANDBOXD_VM_ACCEL:-}
if [ -z "$accel" ]; then
  accel=tcg
  if [ -w /dev/kvm ]; then
    probe=$work/kvm-probe.log
    timeout --kill-after=2 6 qemu-system-x86_64 -accel kvm -machine q35 -cpu host -m 256 \
      -nographic -no-reboot -nodefaults -monitor none -kernel "$kernel" \
      -append "console=ttyS0 panic=-1 rdinit=/nonexistent" -serial "file:$probe" \
      </dev/null >/dev/null 2>&1 && grep -q 'Kernel panic' "$probe" && accel=kvm
  fi
fi
cpu=max
[ "$accel" = kvm ] && cpu=host
scale=${SANDBOXD_VM_TIME_SCALE:-$([ "$accel" = kvm ] && echo 2 || echo 4)}
log "accelerator $accel, engine_test time scale $scale"

install -m 0755 "$here/init" "$root/init"
install -m 0644 "$here/suite.sh" "$root/vmtest/suite.sh"
# The hostile-.pth package (tests/lib/hostile_package.py): its wheel, the
# report a run prints, and the module itself, whose confined() the VM checks.
mkdir -p "$root/vmtest/wheels" "$root/vmtest/lib"
cp "$here/../lib/hostile_package.py" "$here/../lib/wheelhouse.py" "$root/vmtest/lib/"
/usr/bin/python3 -I - "$here/../lib" "$root/vmtest" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import hostile_package as hp
hp.make_hostile_wheel(sys.argv[2] + "/wheels")
with open(sys.argv[2] + "/hook_report.py", "w") as f:
    f.write(hp.REPORT)
PY
echo "TIME_SCALE=$scale" >"$root/vmtest/config.sh"

initrd=$work/initramfs.cpio.gz
(cd "$root" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) >"$initrd"
log "initramfs $(du -h "$initrd" | cut -f1) built in $(($(date +%s) - t0)) s"

# ---- boot ----
console=$work/console.log
results=$work/results.log
: >"$console"
: >"$results"
t1=$(date +%s)
set +e
timeout --kill-after=10 "$timeout_s" qemu-system-x86_64 \
  -accel "$accel" -machine q35 -cpu "$cpu" -smp 2 -m 1024 \
  -nographic -no-reboot -nodefaults -monitor none \
  -kernel "$kernel" -initrd "$initrd" \
  -append "console=ttyS0 loglevel=3 panic=-1 rdinit=/init" \
  -serial "file:$console" -serial "file:$results" </dev/null
qemu_rc=$?
set -e
elapsed=$(($(date +%s) - t1))
log "qemu exited with $qemu_rc after ${elapsed} s"

show_console() {
  echo "----- VM console ($console) -----" >&2
  cat "$console" >&2
  echo "----- end of VM console -----" >&2
}

tr -d '\r' <"$results" >"$results.txt"
if [ "$qemu_rc" -eq 124 ] || [ "$qemu_rc" -eq 137 ]; then
  show_console
  die "the VM did not finish within $timeout_s s (qemu killed)"
fi
if [ "$qemu_rc" -ne 0 ]; then
  show_console
  die "qemu failed ($qemu_rc)"
fi
summary=$(grep -E '^VMTEST-SUMMARY ' "$results.txt" | tail -n 1 || true)
if [ -z "$summary" ]; then
  show_console
  die "the VM printed no summary (crashed or powered off early)"
fi
npass=$(grep -cE '^VMTEST [^ ]+ PASS$' "$results.txt" || true)
nfail=$(grep -cE '^VMTEST [^ ]+ FAIL$' "$results.txt" || true)
sum_pass=$(sed -n 's/.*passed=\([0-9]*\).*/\1/p' <<<"$summary")
sum_fail=$(sed -n 's/.*failed=\([0-9]*\).*/\1/p' <<<"$summary")

# The checks that must have run and passed, whatever else the suite grows.
required=(cgroup2_mounted engine_test_exit engine_test_all_ran engine_backend_is_v2
  engine_clone_into_cgroup engine.test_killed_by_memory engine.test_timeout_busy_loop
  engine.test_killed_by_output_limit engine.test_killed_by_signal_segv
  engine.test_fork_bomb_is_contained engine.test_pids_limit_refuses_fork
  engine.test_memory_under_limit_runs exec_backend_v2 exec_peak_is_memory_peak
  service_ready service_info_says_v2 service_hello_world delegated_made_leaf
  delegated_controllers_enabled container_backend_v2 session_files_not_charged_to_others
  session_files_count_for_the_session session_run_refused_beside_its_files
  session_memory_group_freed zygote_hello zygote_confined_like_cold zygote_memory_killed
  zygote_peak_memory zygote_fork_bomb_timeout zygote_left_no_process zygote_left_no_run_cgroup
  interp_state_kept interp_oom_killed_by_memory interp_state_lost_after_oom
  interp_child_oom_ends_interpreter
  zygote_hook_all_confined zygote_hook_ran_in_zygote zygote_hook_no_sbxhookd)
absent=()
for r in "${required[@]}"; do
  grep -qxF "VMTEST $r PASS" "$results.txt" || absent+=("$r")
done

echo "vm-test: $summary (results lines: $npass PASS, $nfail FAIL; VM ${elapsed} s, total $(($(date +%s) - t0)) s)"
grep -E '^VMTEST [^ ]+ FAIL$' "$results.txt" >&2 || true
if [ "$nfail" -ne 0 ] || [ "$sum_fail" != 0 ] || [ "$sum_pass" != "$npass" ] || [ "${#absent[@]}" -ne 0 ]; then
  show_console
  [ "${#absent[@]}" -eq 0 ] || log "required checks that did not pass: ${absent[*]}"
  die "$nfail in-VM checks failed"
fi
echo "vm-test: PASS"
