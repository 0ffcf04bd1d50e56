# Shared settings and helpers for localstack/up, down and reset. Sourced, not run.
# Every port can be overridden by environment; the defaults match LocalStack's
# single edge port (4566) for moto and kinesis-local's own defaults.

LS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT_DIR=$(dirname "$LS_DIR")
CACHE_DIR="$LS_DIR/.cache"   # installed emulators (ignored by git)
RUN_DIR="$LS_DIR/.run"       # pid files, logs, the mode in use (ignored by git)
ENV_FILE="$LS_DIR/.env"

# Pinned versions: bump deliberately, the tests depend on their behaviour.
KINESIS_LOCAL_VERSION=0.6.2
MOTO_VERSION=5.2.5

KINESIS_PORT=${TIDEMARK_KINESIS_PORT:-4568}          # kinesis-local plain HTTP
KINESIS_TLS_PORT=${TIDEMARK_KINESIS_TLS_PORT:-4567}  # kinesis-local always opens a TLS port too
MOTO_PORT=${TIDEMARK_MOTO_PORT:-4566}                # moto: DynamoDB and SQS
LIMITS_PORT=${TIDEMARK_LIMITS_PORT:-4580}            # tidemark-limits proxy, when asked for
LOCAL_REGION=${TIDEMARK_LOCAL_REGION:-us-east-1}
READY_TIMEOUT=${TIDEMARK_STACK_TIMEOUT:-90}          # seconds to wait for each service

say() { printf 'localstack: %s\n' "$*" >&2; }
die() { printf 'localstack: error: %s\n' "$*" >&2; exit 1; }

docker_engine() { command -v docker >/dev/null 2>&1 && timeout 5 docker info >/dev/null 2>&1; }

# pid_alive FILE NEEDLE: the pid in FILE is alive and its command line contains
# NEEDLE (so a recycled pid of some other program is never mistaken for ours).
pid_alive() {
  local file=$1 needle=$2 pid
  [ -f "$file" ] || return 1
  pid=$(cat "$file" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$needle"
}

# port_owner PORT: prints who listens on PORT (any address), empty when free.
port_owner() {
  ss -Hltnp "sport = :$1" 2>/dev/null | head -1 | sed -E 's/.*users:\(\("([^"]+)",pid=([0-9]+).*/\1 (pid \2)/'
}

# aws_call URL CONTENT_TYPE TARGET SERVICE: one real API call with dummy SigV4
# credentials (moto routes on the credential scope's service name); prints the
# HTTP status (000 when nothing answers).
aws_call() {
  curl -s -m 5 -o /dev/null -w '%{http_code}' -X POST "$1" \
    -H "Content-Type: $2" -H "X-Amz-Target: $3" -H "X-Amz-Date: 20260101T000000Z" \
    -H "Authorization: AWS4-HMAC-SHA256 Credential=test/20260101/$LOCAL_REGION/$4/aws4_request, SignedHeaders=host, Signature=0" \
    -d '{}' 2>/dev/null || true
}
# aws_json URL CONTENT_TYPE TARGET SERVICE BODY: one API call; prints the
# response body, fails on a non-2xx status.
aws_json() {
  curl -sf -m 30 -X POST "$1" \
    -H "Content-Type: $2" -H "X-Amz-Target: $3" -H "X-Amz-Date: 20260101T000000Z" \
    -H "Authorization: AWS4-HMAC-SHA256 Credential=test/20260101/$LOCAL_REGION/$4/aws4_request, SignedHeaders=host, Signature=0" \
    -d "$5"
}
kinesis_call() { aws_json "$AWS_ENDPOINT_URL_KINESIS" application/x-amz-json-1.1 "Kinesis_20131202.$1" kinesis "$2"; }

kinesis_ok()  { [ "$(aws_call "$1" application/x-amz-json-1.1 Kinesis_20131202.ListStreams kinesis)" = 200 ]; }
dynamodb_ok() { [ "$(aws_call "$1" application/x-amz-json-1.0 DynamoDB_20120810.ListTables dynamodb)" = 200 ]; }
sqs_ok()      { [ "$(aws_call "$1" application/x-amz-json-1.0 AmazonSQS.ListQueues sqs)" = 200 ]; }

# wait_for NAME CHECK URL [PIDFILE NEEDLE]: polls CHECK until it passes, the
# deadline passes, or the process we started died.
wait_for() {
  local name=$1 check=$2 url=$3 pidfile=${4:-} needle=${5:-} deadline=$((SECONDS + READY_TIMEOUT))
  until "$check" "$url"; do
    if [ -n "$pidfile" ] && ! pid_alive "$pidfile" "$needle"; then
      say "$name exited during start-up; last lines of its log:"
      tail -n 20 "$RUN_DIR/$name.log" >&2 2>/dev/null || true
      die "$name did not start (log: $RUN_DIR/$name.log)"
    fi
    [ "$SECONDS" -lt "$deadline" ] || die "$name did not answer a $check call at $url within ${READY_TIMEOUT}s (log: $RUN_DIR/$name.log)"
    sleep 0.3
  done
}

# spawn PIDFILE LOG CMD...: starts CMD in its own session, detached from this
# terminal, and records the pid of CMD itself (not of a wrapper) in PIDFILE.
spawn() {
  local pidfile=$1 log=$2 i
  shift 2
  rm -f "$pidfile"
  setsid sh -c 'echo $$ >"$0"; exec "$@"' "$pidfile" "$@" >"$log" 2>&1 </dev/null &
  for i in $(seq 1 50); do [ -s "$pidfile" ] && return 0; sleep 0.1; done
  die "could not start $1 (no pid recorded)"
}

# stop_pidfile FILE NEEDLE: stops the process a pid file names, if it is ours.
stop_pidfile() {
  local file=$1 needle=$2 pid i
  [ -f "$file" ] || return 0
  if pid_alive "$file" "$needle"; then
    pid=$(cat "$file")
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
    say "stopped $(basename "$file" .pid) (pid $pid)"
  fi
  rm -f "$file"
}

# stack_running: the stack `up` started (this checkout's pid files) still runs.
stack_running() {
  case "$(cat "$RUN_DIR/mode" 2>/dev/null)" in
    native) pid_alive "$RUN_DIR/kinesis.pid" kinesis-local && pid_alive "$RUN_DIR/moto.pid" moto_server ;;
    docker) dynamodb_ok http://127.0.0.1:4566 ;;
    *) return 1 ;;
  esac
}
