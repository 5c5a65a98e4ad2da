#!/usr/bin/env bash
# Runs maxnorm_jax.main on every worker of a fresh Cloud TPU VM slice, then deletes the slice.
#
#   launch/tpu_pod.sh --name NAME --zone ZONE --accelerator-type v5p-32 [--version V] [--project P]
#                     [--spot] [--keep] [--git URL [--ref REF]] [--skip-plan] [--dry-run] -- MAIN_ARGS...
#
# Steps: plan the run on this machine first (`python -m maxnorm_jax.plan --topology=TYPE` with the
# --config arguments of MAIN_ARGS; it needs the `tpu` extra here, and $MAXNORM_PLAN_PYTHON names the
# interpreter, default python3), and stop with its exit code when a piece of the step does not fit the
# slice, so a run that cannot fit never costs a slice (--skip-plan: do not plan); create the slice; copy the repository to every worker (a tarball of the working tree:
# tracked and untracked, not ignored, files; or `git clone URL` with --git); install it in a
# Python 3.11 virtual environment (made with uv) with jax[tpu]; run
# `MAXNORM_TPU_POD=1 python -m maxnorm_jax.main MAIN_ARGS` on all workers at once (their output
# streams here); delete the slice on exit, also on failure or Ctrl-C, unless --keep.
# --dry-run prints every command, one per line prefixed with "+ ", and runs nothing.
# Exit code: that of the run on the workers; 2 for a usage error.

set -euo pipefail

usage() {
  cat <<'USAGE'
usage: launch/tpu_pod.sh --name NAME --zone ZONE --accelerator-type TYPE [--version V] [--project P]
                         [--spot] [--keep] [--git URL [--ref REF]] [--skip-plan] [--dry-run] -- MAIN_ARGS...
  --name              TPU VM name (lowercase letters, digits, hyphens)
  --zone              e.g. us-east5-a
  --accelerator-type  e.g. v5p-32, v5litepod-16, v6e-8, v4-32
  --version           TPU software version (default from the type: v4 tpu-ubuntu2204-base,
                      v5litepod v2-alpha-tpuv5-lite, v5p v2-alpha-tpuv5, v6e v2-alpha-tpuv6e)
  --project           GCP project (default: gcloud's configured project)
  --spot              create a Spot slice
  --keep              do not delete the slice at the end
  --git URL           clone URL on the workers instead of copying the working tree (--ref: a
                      branch, tag or commit to check out)
  --skip-plan         do not compile the step for the slice first (python -m maxnorm_jax.plan)
  --dry-run           print the commands ("+ " prefixed), run nothing
USAGE
}

die_usage() {
  echo "tpu_pod.sh: $1" >&2
  usage >&2
  exit 2
}

name="" zone="" accel="" version="" project="" spot=0 keep=0 dry=0 git_url="" git_ref="" skip_plan=0
need_value() { [[ $# -ge 2 && -n "$2" && "$2" != --* ]] || die_usage "$1 needs a value"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --name) need_value "$@"; name="$2"; shift 2 ;;
    --zone) need_value "$@"; zone="$2"; shift 2 ;;
    --accelerator-type) need_value "$@"; accel="$2"; shift 2 ;;
    --version) need_value "$@"; version="$2"; shift 2 ;;
    --project) need_value "$@"; project="$2"; shift 2 ;;
    --git) need_value "$@"; git_url="$2"; shift 2 ;;
    --ref) need_value "$@"; git_ref="$2"; shift 2 ;;
    --name=*|--zone=*|--accelerator-type=*|--version=*|--project=*|--git=*|--ref=*)
      die_usage "write ${1%%=*} VALUE, not ${1%%=*}=VALUE" ;;
    --spot) spot=1; shift ;;
    --keep) keep=1; shift ;;
    --dry-run) dry=1; shift ;;
    --skip-plan) skip_plan=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) die_usage "unknown argument '$1' (arguments for maxnorm_jax.main go after --)" ;;
  esac
done
main_args=("$@")

missing=()
[[ -n "$name" ]] || missing+=(--name)
[[ -n "$zone" ]] || missing+=(--zone)
[[ -n "$accel" ]] || missing+=(--accelerator-type)
[[ ${#missing[@]} -eq 0 ]] || die_usage "missing required flag(s): ${missing[*]}"
[[ "$name" =~ ^[a-z]([-a-z0-9]*[a-z0-9])?$ ]] \
  || die_usage "--name '$name' must be lowercase letters, digits and hyphens, starting with a letter"
[[ -z "$git_ref" || -n "$git_url" ]] || die_usage "--ref needs --git"
if [[ -z "$version" ]]; then
  case "$accel" in
    v4-*) version="tpu-ubuntu2204-base" ;;
    v5litepod-*|v5e-*) version="v2-alpha-tpuv5-lite" ;;
    v5p-*) version="v2-alpha-tpuv5" ;;
    v6e-*) version="v2-alpha-tpuv6e" ;;
    *) die_usage "no default --version for accelerator type '$accel'; pass --version" ;;
  esac
fi

# Shell-quotes one word when it needs it (like Python's shlex.quote).
quote() {
  if [[ -n "$1" && "$1" =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then
    printf '%s' "$1"
  else
    printf "'%s'" "${1//\'/\'\\\'\'}"
  fi
}

# Prints the command ("+ " prefixed); runs it unless --dry-run.
run() {
  local line="+" word
  for word in "$@"; do line+=" $(quote "$word")"; done
  echo "$line"
  [[ $dry -eq 1 ]] || "$@"
}

common=(--zone "$zone")
[[ -z "$project" ]] || common+=(--project "$project")
remote_dir="maxnorm_jax"           # relative to each worker's home directory
remote_tar="maxnorm_jax.tar.gz"
python="\$HOME/$remote_dir/.venv/bin/python"

main_cmd="MAXNORM_TPU_POD=1 $python -m maxnorm_jax.main"
for word in "${main_args[@]}"; do main_cmd+=" $(quote "$word")"; done
main_cmd="cd \$HOME/$remote_dir && $main_cmd"

install_cmd="set -e; cd \$HOME/$remote_dir"
install_cmd+=" && (command -v uv >/dev/null || curl -LsSf https://astral.sh/uv/install.sh | sh)"
install_cmd+=" && export PATH=\$HOME/.local/bin:\$PATH"
install_cmd+=" && uv venv -q --python 3.11 .venv"
install_cmd+=" && uv pip install -q --python .venv/bin/python -e . 'jax[tpu]'"

delete_slice() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ $keep -eq 1 ]]; then
    echo "tpu_pod.sh: keeping $name (delete it with: gcloud compute tpus tpu-vm delete $name --zone $zone --quiet)" >&2
  else
    run gcloud compute tpus tpu-vm delete "$name" "${common[@]}" --quiet || true
  fi
  exit "$rc"
}

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ $skip_plan -eq 0 ]]; then
  plan_args=()
  for word in "${main_args[@]}"; do [[ "$word" != --config* ]] || plan_args+=("$word"); done
  plan_rc=0
  run env -C "$repo_root" JAX_PLATFORMS=cpu "${MAXNORM_PLAN_PYTHON:-python3}" -m maxnorm_jax.plan \
    --topology="$accel" "${plan_args[@]}" || plan_rc=$?
  if [[ $plan_rc -ne 0 ]]; then
    echo "tpu_pod.sh: the plan for $accel failed (exit $plan_rc); no slice was created (--skip-plan to skip it)" >&2
    exit "$plan_rc"
  fi
fi

create=(gcloud compute tpus tpu-vm create "$name" "${common[@]}" --accelerator-type "$accel" --version "$version")
[[ $spot -eq 0 ]] || create+=(--spot)

if [[ $dry -eq 0 ]]; then
  command -v gcloud >/dev/null || { echo "tpu_pod.sh: gcloud not found on PATH" >&2; exit 1; }
  trap delete_slice EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
fi

run "${create[@]}"
if [[ -n "$git_url" ]]; then
  clone="rm -rf \$HOME/$remote_dir && git clone -q $(quote "$git_url") \$HOME/$remote_dir"
  [[ -z "$git_ref" ]] || clone+=" && git -C \$HOME/$remote_dir checkout -q $(quote "$git_ref")"
  run gcloud compute tpus tpu-vm ssh "$name" "${common[@]}" --worker=all --command "$clone"
else
  tarball="${TMPDIR:-/tmp}/$name-$remote_tar"
  # Tracked and untracked (not ignored) files of the working tree; tracked files deleted since are skipped.
  run bash -c 'cd "$1" && git ls-files -z -co --exclude-standard | tar --null --ignore-failed-read -T - -czf "$2"' \
    tar_tree "$repo_root" "$tarball"
  run gcloud compute tpus tpu-vm scp "$tarball" "$name:$remote_tar" "${common[@]}" --worker=all
  run gcloud compute tpus tpu-vm ssh "$name" "${common[@]}" --worker=all \
    --command "rm -rf \$HOME/$remote_dir && mkdir -p \$HOME/$remote_dir && tar -xzf \$HOME/$remote_tar -C \$HOME/$remote_dir"
fi
run gcloud compute tpus tpu-vm ssh "$name" "${common[@]}" --worker=all --command "$install_cmd"
rc=0
run gcloud compute tpus tpu-vm ssh "$name" "${common[@]}" --worker=all --command "$main_cmd" || rc=$?
if [[ $dry -eq 1 ]]; then
  [[ $keep -eq 1 ]] || run gcloud compute tpus tpu-vm delete "$name" "${common[@]}" --quiet
  exit 0
fi
[[ $rc -eq 0 ]] || echo "tpu_pod.sh: the run on $name exited with code $rc" >&2
exit "$rc"
