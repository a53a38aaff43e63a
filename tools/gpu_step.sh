# step NAME SECONDS COMMAND...: run COMMAND under a time limit, its output in $OUT/NAME.log,
# then show its exit status and the log's tail (GPU_TAIL lines, default 20) without
# tracebacks' source lines and warnings. Sourced by tools/gpu_check.sh and tools/gpu_warp.sh.
step() {
    local name=$1 limit=$2
    shift 2
    echo "=== $name $(date +%T)"
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    echo "rc $?"
    grep -v "^    \|^\.\.\.\|[Ww]arn" "$OUT/$name.log" | tail -"${GPU_TAIL:-20}"
}
