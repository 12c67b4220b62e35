# Boots a private systemd, run by bash as the parent of PID 1 inside new
# PID, mount, UTS, IPC and cgroup namespaces (`unshare --fork --pid
# --mount --uts --ipc --cgroup bash boot-systemd.sh DIR NAME`). It mounts a
# copy-on-write overlay of the host on DIR/root (writes land in DIR/upper)
# and the API filesystems, writes a minimal target eukhe-NAME.target and
# masks the units that must never start, and becomes systemd. Used by the
# tests (tests/support/systemd.rs) and the soak (soak/hosts.py).
set -eu
dir=$1
name=$2
root=$dir/root
target=eukhe-$name.target
mount --make-rprivate /
mount -t overlay overlay -o "lowerdir=/,upperdir=$dir/upper,workdir=$dir/work" "$root"
mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
mount -t cgroup2 cgroup2 "$root/sys/fs/cgroup"
mount --rbind /dev "$root/dev"
mount -t tmpfs tmpfs "$root/run"
mount -t tmpfs tmpfs "$root/tmp"
mkdir -p "$root/etc/systemd/system" "$root/var/log/journal"
# Gettys, the network and timers of the host have no place in a test boot.
for unit in getty@.service serial-getty@.service console-getty.service \
  container-getty@.service getty.target systemd-networkd.service \
  systemd-resolved.service systemd-timesyncd.service cron.service ssh.service \
  apt-daily.timer apt-daily-upgrade.timer; do
  ln -sf /dev/null "$root/etc/systemd/system/$unit"
done
cat > "$root/etc/systemd/system/$target" <<UNIT
[Unit]
Description=eukhe $name target (a minimal boot)
Wants=systemd-journald.service systemd-logind.service
UNIT
echo "eukhe-$name" > "$root/etc/hostname"
exec chroot "$root" /lib/systemd/systemd --system "--unit=$target"
