# lg_herald.sh: starts and stops one real herald for the loadgen integration tests
# (test_loadgen.sh, test_loadgen_report.sh). Source it after setting:
#   herald  the herald binary     work  a scratch directory (herald.log goes there)
#   fail    a function that prints its arguments and the logs, and exits 1
# herald listens on free loopback ports (port 0; its ev=listening line names them) and is
# stopped by PID. start_herald sets pid, port, ws_port (empty without --ws-listen) and
# admin_port; reap_herald leaves herald's exit status in st.
pid=""
log_pid=""

# Sends SIGTERM and reaps herald, then the copier of its log. Leaves the exit status in st.
reap_herald() {
    st=0
    if [ -n "$pid" ]; then
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || st=$?
        pid=""
    fi
    if [ -n "$log_pid" ]; then
        wait "$log_pid" 2>/dev/null || true
        log_pid=""
    fi
}

# Stops herald and fails unless it exits 0 after SIGTERM: a crash or a sanitizer report
# (ThreadSanitizer exits 66, at the report or at exit) in herald fails the test, not only one
# in loadgen.
stop_herald() {
    reap_herald
    [ "$st" -eq 0 ] || fail "herald exited $st after SIGTERM"
}

# Starts herald with the given flags and reads its listening line through a FIFO: no
# sleeping, and a 20 s bound. Sets pid, port, ws_port and admin_port.
start_herald() {
    rm -f "$work/herald.fifo"
    mkfifo "$work/herald.fifo"
    "$herald" --listen 127.0.0.1:0 --admin 127.0.0.1:0 --io-threads 2 "$@" \
        2>"$work/herald.fifo" &
    pid=$!
    exec 3<"$work/herald.fifo"
    port=""
    while IFS= read -r -t 20 line <&3; do
        echo "$line" >>"$work/herald.log"
        if [[ $line =~ ev=listening.*[[:space:]]port=([0-9]+)[[:space:]]admin_port=([0-9]+)([[:space:]]ws_port=([0-9]+))? ]]; then
            port=${BASH_REMATCH[1]}
            admin_port=${BASH_REMATCH[2]}
            ws_port=${BASH_REMATCH[4]}
            break
        fi
    done
    cat <&3 >>"$work/herald.log" &
    log_pid=$!
    exec 3<&-
    [ -n "$port" ] || fail "herald did not print ev=listening port=N admin_port=M"
}
