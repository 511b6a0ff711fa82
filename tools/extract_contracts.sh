#!/bin/sh
# Re-extract the vendor descriptions the contract tests hold the stand-ins to (tests/contracts/).
# Each needs a local clone or mirror of its repository; set the *_GIT variables to them.
set -eu
PY=${PY:-.venv/bin/python}
STRIPE_GIT=${STRIPE_GIT:?a clone of github.com/stripe/openapi}
JIRA_GIT=${JIRA_GIT:?a clone of github.com/jarekbird/jira-api-mcp-wrapper}
RESEND_GIT=${RESEND_GIT:?a clone of github.com/resend/resend-openapi}

"$PY" -P tools/extract_openapi.py --git-dir "$STRIPE_GIT" --repository stripe/openapi \
  --commit 63a674638635c68de26b9f3add13e58198f4df44 --path openapi/spec3.yaml \
  --operation "POST /v1/payment_intents" --operation "GET /v1/payment_intents" \
  --operation "GET /v1/payment_intents/search" --operation "GET /v1/payment_intents/{intent}" \
  --operation "POST /v1/payment_intents/{intent}/capture" \
  --operation "POST /v1/payment_intents/{intent}/cancel" \
  --operation "POST /v1/refunds" --operation "GET /v1/refunds" \
  --keep-schema payment_intent --keep-schema refund --keep-schema error \
  --keep-schema api_errors \
  --out tests/contracts/stripe.openapi.json

"$PY" -P tools/extract_openapi.py --git-dir "$JIRA_GIT" --repository jarekbird/jira-api-mcp-wrapper \
  --commit fea6054694f99860c85887a64b9f169fec71ed18 --path swagger-v3.v3.json \
  --operation "POST /rest/api/3/issue" --operation "GET /rest/api/3/issue/{issueIdOrKey}" \
  --operation "DELETE /rest/api/3/issue/{issueIdOrKey}" \
  --operation "GET /rest/api/3/issue/{issueIdOrKey}/transitions" \
  --operation "POST /rest/api/3/issue/{issueIdOrKey}/transitions" \
  --operation "POST /rest/api/3/issue/{issueIdOrKey}/comment" \
  --operation "POST /rest/api/3/search/jql" --operation "GET /rest/api/3/myself" \
  --operation "GET /rest/api/3/project/{projectIdOrKey}" \
  --operation "GET /rest/api/3/project/{projectIdOrKey}/statuses" \
  --operation "GET /rest/api/3/issue/createmeta/{projectIdOrKey}/issuetypes/{issueTypeId}" \
  --out tests/contracts/jira.openapi.json

"$PY" -P tools/extract_openapi.py --git-dir "$RESEND_GIT" --repository resend/resend-openapi \
  --commit fd6f395f2114e13806025f0c330921c901d62bb1 --path resend.yaml \
  --operation "POST /emails" --operation "GET /emails" --operation "GET /emails/{email_id}" \
  --operation "GET /api-keys" \
  --out tests/contracts/resend.openapi.json
