#!/usr/bin/env bash
# Run the student's notebooks inside the JupyterLab image (docker/lab/Dockerfile), as a
# student's Run All would, where Docker itself cannot run: a chroot through buildah, the
# method docker/Dockerfile's image was tested with (docs/several-nodes.md, "A container").
#
#   scripts/lab_image_check.sh IMAGE OUT [NOTEBOOK ...]   # default: every notebook
#
# Each notebook is executed by jupyter nbconvert inside the image (as its user; a chroot
# shares the host's network, and the image sets HF_HUB_OFFLINE=1: the notebooks need
# none), its wall time printed, its executed copy written to OUT. A
# failing cell fails the script. Needs root and buildah. The image itself was built with
#
#   podman build --format docker --isolation chroot --network host \
#     --build-arg BASE_IMAGE=<a Debian 12 base with Python 3.11> \
#     -f docker/lab/Dockerfile -t IMAGE .
#
# (where the official python:3.11-slim-bookworm cannot be pulled: debootstrap a Debian 12
# minbase, copy a Python 3.11 into /usr/local, podman import it; docs/course.md).
set -euo pipefail
[ $# -ge 2 ] || { echo "error: scripts/lab_image_check.sh IMAGE OUT [NOTEBOOK ...]" >&2; exit 2; }
image=$1 out=$2
shift 2
command -v buildah >/dev/null || { echo "error: buildah is missing (apt-get install buildah)" >&2; exit 1; }
mkdir -p "$out"
ctr=$(buildah from --pull-never "$image")
trap 'buildah rm "$ctr" >/dev/null' EXIT
notebooks=("$@")
if [ ${#notebooks[@]} -eq 0 ]; then
  mapfile -t notebooks < <(buildah run --isolation chroot "$ctr" -- \
    bash -c 'cd notebooks && ls [0-9][0-9]_*.ipynb')
fi
status=0
for nb in "${notebooks[@]}"; do
  start=$(date +%s)
  # (--hostname localhost: Docker writes a container's own name into its /etc/hosts,
  # buildah's chroot does not, and torchrun's rendezvous, notebook 04's 2-rank run,
  # connects to this host by its name)
  if buildah run --isolation chroot --network host --hostname localhost "$ctr" -- \
      jupyter nbconvert --to notebook --execute --ExecutePreprocessor.timeout=1800 \
      --output-dir /tmp/executed "notebooks/$nb" > "$out/${nb%.ipynb}.log" 2>&1; then
    result=pass
  else
    result=FAIL status=1
  fi
  echo "$nb: $result in $(( $(date +%s) - start )) s (load $(cut -d' ' -f1 /proc/loadavg))"
done
mnt=$(buildah mount "$ctr")
cp "$mnt"/tmp/executed/*.ipynb "$out"/ 2>/dev/null || true
buildah umount "$ctr" >/dev/null
exit "$status"
