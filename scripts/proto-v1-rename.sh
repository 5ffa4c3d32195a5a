#!/bin/sh
# proto-v1-rename.sh - the purely mechanical half of wire contract v1 (issue
# #13): regular XxxRequest/XxxReply message names and enum values prefixed
# with their enum's name, in proto/toggle.proto and in every C identifier
# protoc-c derives from them.  Field numbers, wire bytes and behaviour do
# not change.  Idempotent: run it again after merging a branch written
# against the old names (from the repository root, on tracked files).
#   Hello          -> HelloRequest          (Toggle__HelloRequest, ...)
#   RegisterAgent  -> RegisterAgentRequest  (Toggle__RegisterAgentRequest, ...)
#   RegisterReply  -> RegisterAgentReply    (Toggle__RegisterAgentReply, ...)
#   SetOp REPLACE/ADD/REMOVE -> SET_OP_*    (TOGGLE__SET_OP__SET_OP_REPLACE, ...)
#   EventKind AGENT_JOINED.. -> EVENT_KIND_* (TOGGLE__EVENT_KIND__EVENT_KIND_AGENT_JOINED, ...)
# Oneof field names of Envelope (hello, register_agent, ...) are kept, so
# TOGGLE__ENVELOPE__BODY_* and env->hello etc. do not change.
set -eu
cd "$(git rev-parse --show-toplevel)"

kinds="AGENT_JOINED AGENT_LEFT SET_APPLIED PLAN_REJECTED ANOMALY"
ops="REPLACE ADD REMOVE"

# The schema: declarations and the words in its comments.
proto_sed="-e s/\bHello\b/HelloRequest/g -e s/\bRegisterAgent\b/RegisterAgentRequest/g"
proto_sed="$proto_sed -e s/\bRegisterReply\b/RegisterAgentReply/g"
for o in $ops; do proto_sed="$proto_sed -e s/^\(\s*\)$o\(\s*=\)/\1SET_OP_$o\2/"; done
for k in $kinds; do proto_sed="$proto_sed -e s/^\(\s*\)$k\(\s*=\)/\1EVENT_KIND_$k\2/"; done
# shellcheck disable=SC2086
sed -i $proto_sed proto/toggle.proto

# The C identifiers protoc-c generates, wherever code uses them.
c_sed="-e s/\bToggle__Hello\b/Toggle__HelloRequest/g"
c_sed="$c_sed -e s/\bTOGGLE__HELLO__INIT\b/TOGGLE__HELLO_REQUEST__INIT/g"
c_sed="$c_sed -e s/\btoggle__hello__/toggle__hello_request__/g"
c_sed="$c_sed -e s/\bToggle__RegisterAgent\b/Toggle__RegisterAgentRequest/g"
c_sed="$c_sed -e s/\bTOGGLE__REGISTER_AGENT__INIT\b/TOGGLE__REGISTER_AGENT_REQUEST__INIT/g"
c_sed="$c_sed -e s/\btoggle__register_agent__/toggle__register_agent_request__/g"
c_sed="$c_sed -e s/\bToggle__RegisterReply\b/Toggle__RegisterAgentReply/g"
c_sed="$c_sed -e s/\bTOGGLE__REGISTER_REPLY__INIT\b/TOGGLE__REGISTER_AGENT_REPLY__INIT/g"
c_sed="$c_sed -e s/\btoggle__register_reply__/toggle__register_agent_reply__/g"
for o in $ops; do c_sed="$c_sed -e s/\bTOGGLE__SET_OP__$o\b/TOGGLE__SET_OP__SET_OP_$o/g"; done
for k in $kinds; do c_sed="$c_sed -e s/\bTOGGLE__EVENT_KIND__$k\b/TOGGLE__EVENT_KIND__EVENT_KIND_$k/g"; done

files=$(git ls-files '*.c' '*.h' '*.cu')
# shellcheck disable=SC2086
[ -z "$files" ] || sed -i $c_sed $files
echo "proto-v1-rename: done; rebuild (the generated code follows proto/toggle.proto)"
