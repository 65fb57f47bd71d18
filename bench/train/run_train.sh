#!/usr/bin/env bash
# Real training steps (bench/train/train_step.py) on an emulated cluster
# (scripts/emulated_cluster.sh: one rank per network namespace, links shaped
# with tc), every system in one sitting, then a table with ratios against
# torch DDP and against the compute-only floor measured in the same sitting.
#
# usage: bench/train/run_train.sh [-n HOSTS] [-r "1gbit 10gbit"] [-M "resnet50 transformer"]
#                                 [-S "systems"] [-R repeats] [-o OUT.jsonl] [-b BUILD] [-s STEPS]
#                                 [-e "VAR=VALUE ..."] [-l LATENCY]
# -l: added one-way latency per link (scripts/emulated_cluster.sh -l, for
# example 0.5ms; default none).
# -s: steps per run (default 40), the last 10 measured (all of them below 11).
# -b: the build whose libmgs.so runs (an A/B of two commits: two builds,
# two calls); -e: extra variables for every rank of every system (an A/B of
# a setting).
# mgs runs with the defaults a user gets: `mgs` is dense (MGS_* unset), and
# `mgs-sparse` sets only MGS_COMPRESSOR=gaussiank MGS_DENSITY=0.001 (what
# `mgsrun --compressor gaussiank --density 0.001` exports), plus
# MGS_WARMUP_STEPS=0: at 0.001 the default density warm-up spans the first
# 50 steps, and these runs time steps 20-29, which should be the steady
# state every later step runs at, not the warm-up's denser transient. `mgs-rndv` and
# `mgs-sparse-rndv` are the same with Open MPI's default TCP eager limits
# (64 KiB) instead of the 1 MiB mgs sets (an A/B of that default); `mgs-sparse-nomc`
# is `mgs-sparse` with DistributedOptimizer(momentum_correction=False). Horovod runs when
# .peers/horovod holds a build (bench/train/build_horovod.sh); DDP/PowerSGD
# use gloo. Needs root (network namespaces).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
hosts=4
rates="1gbit"
models="resnet50"
systems="compute ddp powersgd horovod horovod-fp16 mgs mgs-fp16 mgs-sparse"
repeats=1
out=""
build=build
# 40 steps, the last 10 measured: mgs-sparse profiles 5 steps and then runs up
# to 5 candidate plans on trial, 2 rounds of 2 steps each (MGS_PLAN_TRIAL_STEPS
# = 3), so its plan is settled by step 25; every system is measured over the
# same steps.
steps=40
extra_env=""
latency=""
while getopts "n:r:M:S:R:o:b:s:e:l:h" opt; do
  case $opt in
    n) hosts=$OPTARG ;;
    r) rates=$OPTARG ;;
    M) models=$OPTARG ;;
    S) systems=$OPTARG ;;
    R) repeats=$OPTARG ;;
    o) out=$OPTARG ;;
    b) build=$OPTARG ;;
    s) steps=$OPTARG ;;
    e) extra_env=$OPTARG ;;
    l) latency=$OPTARG ;;
    h) sed -n '2,21p' "$0"; exit 0 ;;
    *) exit 2 ;;
  esac
done
[ -n "$out" ] || out=$(mktemp /tmp/train.XXXXXX.jsonl)
lib=$root/$build/src/capi/libmgs.so
[ -f "$lib" ] || { echo "run_train: $lib not built" >&2; exit 2; }
# Debian's python3-torch runs its matrix products on whatever libblas.so.3 is
# selected, by default the reference BLAS: a ResNet-50 step then costs 1.8x
# and the transformer's 6x the CPU they take with OpenBLAS, which is far
# from the compute of a rank on a GPU node and hides the exchange behind it.
# The serial build keeps one thread per rank (torch.set_num_threads(1)).
for pkg in python3-torchvision libopenblas0-serial; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" && continue
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd=sudo
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null
done
echo "run_train: BLAS $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null)" >&2
hvd_dir=$root/.peers/horovod
subnet=10.78.0
echo "run_train: $(nproc) cores, $(uname -r); results in $out" >&2
for rep in $(seq 1 "$repeats"); do
  for model in $models; do
    for rate in $rates; do
      for system in $systems; do
        env_args="-x MASTER_ADDR=$subnet.1 -x GLOO_SOCKET_IFNAME=eth0 -x PYTHONPATH -x MGS_LIBRARY=$lib"
        for kv in $extra_env; do env_args+=" -x $kv"; done
        py_path=$root/bindings/python
        run_system=$system
        step_args=""
        case $system in
          horovod*)
            if [ ! -d "$hvd_dir/horovod" ]; then echo "run_train: skip $system (no $hvd_dir)" >&2; continue; fi
            py_path=$hvd_dir
            env_args+=" -x HOROVOD_FUSION_THRESHOLD=134217728 -x HOROVOD_CYCLE_TIME=1" ;;
          mgs-rndv|mgs-sparse-rndv)  # Open MPI's own TCP eager limits
            run_system=mgs
            env_args+=" -x OMPI_MCA_btl_tcp_eager_limit=65536 -x OMPI_MCA_btl_tcp_rndv_eager_limit=65536"
            env_args+=" -x OMPI_MCA_btl_tcp_max_send_size=131072"
            if [ "$system" = mgs-sparse-rndv ]; then env_args+=" -x MGS_COMPRESSOR=gaussiank -x MGS_DENSITY=0.001 -x MGS_WARMUP_STEPS=0"; fi ;;
          mgs-sparse|mgs-sparse-nomc)
            run_system=mgs
            [ "$system" = mgs-sparse-nomc ] && step_args="--momentum-correction off"
            env_args+=" -x MGS_COMPRESSOR=gaussiank -x MGS_DENSITY=0.001 -x MGS_WARMUP_STEPS=0" ;;
        esac
        echo "run_train: rep $rep $model $rate $system" >&2
        line=$(PYTHONPATH=$py_path scripts/emulated_cluster.sh -n "$hosts" -r "$rate" ${latency:+-l "$latency"} -s "$subnet" -m "$env_args" -- \
                 /usr/bin/python3 "$root/bench/train/train_step.py" --system "$run_system" --model "$model" \
                 --steps "$steps" --measure-from "$(( steps > 10 ? steps - 9 : 1 ))" --label "$system@$rate" $step_args 2>/tmp/run_train.err | grep '^{' || true)
        if [ -z "$line" ]; then
          echo "run_train: $system failed:" >&2; tail -5 /tmp/run_train.err >&2
          line="{\"label\": \"$system@$rate\", \"system\": \"$run_system\", \"model\": \"$model\", \"failed\": true}"
        fi
        # A job's end is part of the job: any rank's traceback or error line is counted.
        errors=$(grep -c -E 'Traceback|Error|error:|MGS_ERR' /tmp/run_train.err || true)
        [ "$errors" -gt 0 ] && { echo "run_train: $system printed $errors error lines:" >&2; grep -m 5 -E 'Traceback|Error|error:|MGS_ERR' /tmp/run_train.err >&2; }
        echo "$line" | /usr/bin/python3 -c "import json,sys; d=json.load(sys.stdin); d.update(rate='$rate', latency='${latency:-0}', rep=$rep, name='$system', stderr_error_lines=$errors, build='$build', extra_env='$extra_env'); print(json.dumps(d))" >>"$out"
      done
    done
  done
done
/usr/bin/python3 "$root/bench/train/summarize.py" "$out"
