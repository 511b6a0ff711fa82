#!/bin/sh
# Approve, as yourself, the staged plan of an AgentRun that you reviewed (R10).
#   approve.sh RUN [NAMESPACE]                 print the staged plan (every commit step with its
#                                              arguments whole, cards masked) and its hash;
#                                              approves nothing
#   approve.sh RUN NAMESPACE HASH [REASON]     approve the plan of hash HASH: the one you reviewed
# The approval carries the hash you pass, never one read at this moment: if the agent staged
# another plan since your review, nothing is written here (and the admission policy and the
# operator refuse a stale hash anyway); review the new plan. APPROVE_WAIT: how long to wait
# for the operator to record it (default 120s).
set -eu
run="${1:?usage: approve.sh RUN [NAMESPACE [HASH [REASON]]]}"
namespace="${2:-support-agents}"
reviewed="${3:-}"
reason="${4:-plan reviewed}"
staged="$(kubectl -n "$namespace" get agentrun "$run" -o jsonpath='{.status.pivot.planHash}')"
if [ -z "$reviewed" ]; then
  kubectl -n "$namespace" get agentrun "$run" -o jsonpath='{.status.pivot}{"\n"}'
  echo "plan hash: $staged"
  echo "once reviewed, approve it with: $0 $run $namespace $staged"
  exit 0
fi
if [ "$reviewed" != "$staged" ]; then
  echo "agentrun $run awaits approval of plan ${staged:-none}, not of plan $reviewed that you" \
       "reviewed: it was staged again since. Review it with: $0 $run $namespace." \
       "Nothing was written." >&2
  exit 1
fi
me="$(kubectl auth whoami -o jsonpath='{.status.userInfo.username}')"
kubectl -n "$namespace" patch agentrun "$run" --subresource=status --type=merge \
  -p "{\"status\":{\"approval\":{\"planHash\":\"$reviewed\",\"decision\":\"Approved\",\"approver\":\"$me\",\"reason\":\"$reason\"}}}"
kubectl -n "$namespace" wait "agentrun/$run" --for=condition=PivotApproved \
  --timeout="${APPROVE_WAIT:-120s}"
