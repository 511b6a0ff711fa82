#!/bin/sh
# Approve the staged plan of an AgentRun at its pivot, as yourself (the admission policy rejects an
# approval in anyone else's name, or for another plan than status.pivot.planHash).
# Usage: approve.sh RUN [NAMESPACE] [REASON]
set -eu
run="${1:?usage: approve.sh RUN [NAMESPACE] [REASON]}"
namespace="${2:-support-agents}"
reason="${3:-plan reviewed}"
me="$(kubectl auth whoami -o jsonpath='{.status.userInfo.username}')"
hash="$(kubectl -n "$namespace" get agentrun "$run" -o jsonpath='{.status.pivot.planHash}')"
kubectl -n "$namespace" get agentrun "$run" -o jsonpath='{range .status.pivot.commit[*]}{.tool}{"\n"}{end}'
kubectl -n "$namespace" patch agentrun "$run" --subresource=status --type=merge \
  -p "{\"status\":{\"approval\":{\"planHash\":\"$hash\",\"decision\":\"Approved\",\"approver\":\"$me\",\"reason\":\"$reason\"}}}"
kubectl -n "$namespace" wait "agentrun/$run" --for=condition=PivotApproved --timeout=120s
