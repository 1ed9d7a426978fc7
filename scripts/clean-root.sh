# clean-root.sh: sourced by wheel-check.sh and sdist-check.sh.  A clean
# Debian root file system unpacked afresh from the tarball $BASE into $R,
# mounted for chroot (/proc, /dev, a /dev/shm for DataLoader workers), and
# let go when the script exits.

root_needed() {  # NAME: exit 0, saying why, where chroot is not allowed
    if [ "$(id -u)" != 0 ]; then
        echo "$1: skipped: needs root (chroot into a clean root file system)"
        exit 0
    fi
}

root_release() {
    for m in dev/shm dev proc; do umount -l "$R/$m" 2>/dev/null || true; done
}

root_fresh() {  # unpacked, not yet mounted
    root_release
    rm -rf "$R" && mkdir -p "$R" && tar -C "$R" -xf "$BASE"
    cp /etc/resolv.conf "$R/etc/resolv.conf"
}

root_mount() {
    mount -t proc proc "$R/proc"
    mount --bind /dev "$R/dev"
    mount -t tmpfs shm "$R/dev/shm"
}

root_apt() {  # PACKAGE...: installed from Debian's archive, inside the root
    chroot "$R" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
        sh -c "apt-get update -qq && apt-get install -y -qq --no-install-recommends $*" \
        >"$R.apt.log" 2>&1 || { tail -20 "$R.apt.log" >&2; return 1; }
}

trap root_release EXIT
