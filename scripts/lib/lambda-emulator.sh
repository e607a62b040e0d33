# Sourced by scripts/clients: runs flowgate as an AWS Lambda function under the Lambda emulator
# (tests/fakes/lambda/emulator.py: invocation deadlines that kill the sandbox, buffered or
# streamed Function URL responses), its Function URL open (AuthType NONE, flowgate started with
# FLOWGATE_ALLOW_UNAUTHENTICATED) or, given an IAM user, AuthType AWS_IAM (every request
# SigV4-signed by that user's key, flowgate in FLOWGATE_AUTH_MODE=aws-iam as the SAM template
# sets it), for shipped clients to use as they would a deployment.
#
#   start_lambda BIN MANIFEST INVOKE_MODE TIMEOUT_SECS [AKID:SECRET:ARN]
#                                 sets $lambda_url (…/mcp), $lambda_api
#                                 (MANIFEST: a file or folder, copied into the task root;
#                                 AWS_IAM needs botocore in $LAMBDA_PYTHON, default python3)
#   lambda_timeouts                                       prints how many invocations timed out
#   stop_lambda
#
# The manifest ships as a deployment ships it: copied into the function's files (the task root,
# /var/task/tools beside bootstrap, as deploy/lambda/README.md says), never as a path into the
# checkout: a path under /tmp names each sandbox's private /tmp there, as it does on Lambda.
# The local engine's state is in the task root (/var/task/state), shared by every sandbox as a
# remote engine's state would be.

start_lambda() {
  local bin=$1 manifest=$2 mode=$3 timeout=$4 iam_user=${5:-}
  local auth=(--auth-type NONE --env FLOWGATE_ALLOW_UNAUTHENTICATED=true)
  if [ -n "$iam_user" ]; then
    auth=(--auth-type AWS_IAM --iam-user "$iam_user" --env FLOWGATE_AUTH_MODE=aws-iam)
  fi
  lambda_root=$(mktemp -d)
  mkdir -p "$lambda_root/tools"
  if [ -d "$manifest" ]; then cp -R "$manifest/." "$lambda_root/tools/"; else cp "$manifest" "$lambda_root/tools/"; fi \
    || { echo "cannot ship the manifest $manifest"; return 1; }
  "${LAMBDA_PYTHON:-python3}" tests/fakes/lambda/emulator.py --task-root "$lambda_root" --bootstrap "$bin" \
    --timeout "$timeout" --invoke-mode "$mode" --max-sandboxes 6 "${auth[@]}" \
    --env FLOWGATE_LAMBDA_INVOKE_MODE="$mode" \
    --env FLOWGATE_MANIFEST=/var/task/tools --env FLOWGATE_STATE_DIR=/var/task/state \
    --env FLOWGATE_HANDLE_KEYS="l1:$(head -c32 /dev/urandom | base64 -w0)" --env FLOWGATE_LOG=warn \
    </dev/null >"$lambda_root/ready" 2>"$lambda_root/emulator.log" &
  lambda_pid=$!
  for _ in $(seq 100); do [ -s "$lambda_root/ready" ] && break; sleep 0.1; done
  local field
  field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$lambda_root/ready" "$1"; }
  lambda_url=$(field function_url)/mcp || { echo "the Lambda emulator did not start:"; cat "$lambda_root/emulator.log"; return 1; }
  lambda_api=$(field invoke_api)
}

lambda_timeouts() {
  python3 -c 'import json,sys,urllib.request; print(json.load(urllib.request.urlopen(sys.argv[1] + "/_emulator/state"))["timeouts"])' "$lambda_api"
}

stop_lambda() {
  [ -n "${lambda_pid:-}" ] || return 0
  kill "$lambda_pid" 2>/dev/null || true
  wait "$lambda_pid" 2>/dev/null || true
  rm -rf "$lambda_root"
  lambda_pid=
}
