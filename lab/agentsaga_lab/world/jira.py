"""Jira Cloud stand-in (REST v3): issues with labels, transitions, comments, JQL search with lag.

Workflow: an issue starts in `Open`, or in `Draft` (staged, not yet visible to the team) when its
create request has the label `draft` or `"status": {"name": "Draft"}` in `fields`. Transitions:

    id  name      from           to
    11  Open      Draft          Open
    31  Done      Draft, Open    Done
    41  Reopen    Done           Open

Rich text (description, comment body) must be Atlassian Document Format, as in v3. `GET issue` is
read-after-write consistent; `search/jql` sees changes only after the world's search lag, except
for ids passed in `reconcileIssues`. Any Basic auth is accepted; `myself` needs one.

The account (`agentsaga_lab.world.accounts`): projects exist only as listed in `jira_projects`, each
with the issue types Task (10001) and Bug (10002); without `jira_done_transition` the workflow
has no Done status and no transition into it; without `jira_labels` the create screen has no
labels field, and a create that sets labels is refused as Jira refuses it. Read-only views of
that setup: `myself`, `project/{key}`, `project/{key}/statuses`, and the create-screen fields at
`issue/createmeta/{key}/issuetypes/{id}`.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from aiohttp import web

from agentsaga_lab.world.idempotency import Route
from agentsaga_lab.world.index import LaggedIndex, WorldConfig

Obj = dict[str, Any]
_CATEGORY = {
    "Draft": {"id": 2, "key": "new", "colorName": "blue-gray", "name": "To Do"},
    "Open": {"id": 4, "key": "indeterminate", "colorName": "yellow", "name": "In Progress"},
    "Done": {"id": 3, "key": "done", "colorName": "green", "name": "Done"},
}
_STATUS_IDS = {"Draft": "10000", "Open": "10001", "Done": "10002"}
_TRANSITIONS = {"11": ("Open", ("Draft",), "Open"), "31": ("Done", ("Draft", "Open"), "Done"),
                "41": ("Reopen", ("Done",), "Open")}
_ISSUE_TYPES = {"10001": "Task", "10002": "Bug"}
_NOT_FOUND = "Issue does not exist or you do not have permission to see it."
_REMOVED = ("The requested API has been removed. Please migrate to the /rest/api/3/search/jql API. "
            "A full migration guideline is available at "
            "https://developer.atlassian.com/changelog/#CHANGE-2046")


def _error(status: int, messages: list[str], errors: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"errorMessages": messages, "errors": errors or {}}, status=status)


def adf_text(doc: Any) -> str:
    """The plain text of an Atlassian Document Format node."""
    if isinstance(doc, dict):
        if doc.get("type") == "text":
            return str(doc.get("text", ""))
        parts = [adf_text(child) for child in doc.get("content", [])]
        return ("\n" if doc.get("type") == "doc" else "").join(parts)
    return ""


def _is_adf(value: Any) -> bool:
    return isinstance(value, dict) and value.get("type") == "doc" and "content" in value


class JqlError(ValueError):
    pass


def parse_jql(jql: str) -> list[tuple[str, list[str]]]:
    """`field = v`, `field in (a, b)` clauses joined by AND; `ORDER BY` ignored. Fields: labels,
    project, key, issue, status, summary (~ not supported)."""
    body = re.split(r"(?i)\border\s+by\b", jql)[0].strip()
    if not body:
        raise JqlError("Unbounded JQL queries are not allowed here. Please add a search "
                       "restriction to your query.")
    clauses = []
    value = r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|[^\s,()]+"
    for part in re.split(r"(?i)\s+and\s+", body):
        m = re.fullmatch(rf"\s*(\w+)\s*(=|in)\s*(\((.*)\)|{value})\s*", part, re.IGNORECASE)
        if not m:
            raise JqlError(f"Error in the JQL Query: unable to parse '{part.strip()}'.")
        field = m.group(1).lower()
        if field not in ("labels", "project", "key", "issue", "status", "summary"):
            raise JqlError(f"Field '{m.group(1)}' does not exist or you do not have permission "
                           "to view it.")
        raw = re.findall(value, m.group(4)) if m.group(2).lower() == "in" else [m.group(3)]
        values = [v[1:-1].replace('\\"', '"') if v[:1] in "\"'" else v for v in raw]
        clauses.append(("key" if field == "issue" else field, values))
    return clauses


class JiraStandIn:
    """The state and routes of the Jira Cloud stand-in."""

    def __init__(self, config: WorldConfig) -> None:
        self.config = config
        self.reset()

    def reset(self) -> None:
        self.issues: dict[str, Obj] = {}  # by key
        self.counters: dict[str, int] = {}
        self.next_id = 10000
        self.index = LaggedIndex(self.config)

    def routes(self) -> list[Route]:
        base = "/rest/api/3"
        return [
            Route("POST", f"{base}/issue", self.create),
            Route("GET", base + "/issue/{key}", self.get),
            Route("DELETE", base + "/issue/{key}", self.delete),
            Route("GET", base + "/issue/{key}/transitions", self.transitions),
            Route("POST", base + "/issue/{key}/transitions", self.transition),
            Route("POST", base + "/issue/{key}/comment", self.comment),
            Route("GET", f"{base}/search/jql", self.search),
            Route("POST", f"{base}/search/jql", self.search),
            Route("GET", f"{base}/myself", self.myself),
            Route("GET", base + "/project/{project}", self.project),
            Route("GET", base + "/project/{project}/statuses", self.statuses),
            Route("GET", base + "/issue/createmeta/{project}/issuetypes/{type}", self.createmeta),
            Route("GET", f"{base}/search", self.removed),
            Route("POST", f"{base}/search", self.removed),
        ]

    def _find(self, request: web.Request) -> Obj | None:
        ref = request.match_info["key"]
        return self.issues.get(ref) or next(
            (i for i in self.issues.values() if i["id"] == ref), None)

    def _view(self, issue: Obj, request: web.Request, fields: list[str] | None = None) -> Obj:
        status = issue["status"]
        all_fields: Obj = {
            "summary": issue["summary"], "labels": list(issue["labels"]),
            "description": issue["description"], "project": {"key": issue["project"]},
            "issuetype": {"name": issue["issuetype"]},
            "status": {"name": status, "id": _STATUS_IDS[status],
                       "statusCategory": _CATEGORY[status]},
            "resolution": {"name": issue["resolution"]} if issue["resolution"] else None,
            "comment": {"comments": issue["comments"], "total": len(issue["comments"])},
            "created": issue["created"], "updated": issue["updated"],
        }
        if fields is not None and not {"*all", "*navigable"} & set(fields):
            all_fields = {k: v for k, v in all_fields.items() if k in fields}
        return {"id": issue["id"], "key": issue["key"],
                "self": f"{request.url.origin()}/rest/api/3/issue/{issue['id']}",
                "fields": all_fields}

    def _touch(self, issue: Obj) -> None:
        issue["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S.000+0000", time.gmtime())
        self.index.put(issue["id"], issue)

    async def create(self, request: web.Request) -> web.Response:
        try:
            fields = (await request.json()).get("fields") or {}
        except (ValueError, AttributeError):
            return _error(400, ["Invalid request payload. Refer to the REST API documentation."])
        errors: dict[str, str] = {}
        project_ref = fields.get("project") or {}
        project = str(project_ref.get("key") or project_ref.get("id") or "")
        summary = fields.get("summary")
        issuetype = fields.get("issuetype") or {}
        labels = fields.get("labels") or []
        accounts = self.config.accounts
        if not project or project not in accounts.jira_projects:
            errors["project"] = "Specify a valid project ID or key"
        if "labels" in fields and not accounts.jira_labels:
            errors["labels"] = ("Field 'labels' cannot be set. It is not on the appropriate "
                                "screen, or unknown.")
        if not summary:
            errors["summary"] = "You must specify a summary of the issue."
        elif len(summary) >= 255:
            errors["summary"] = "Summary must be less than 255 characters."
        if not (issuetype.get("id") or issuetype.get("name")):
            errors["issuetype"] = "Specify an issue type"
        for label in labels:
            if re.search(r"\s", label):
                errors["labels"] = f"The label '{label}' contains spaces which is invalid."
            elif len(label) > 255:
                errors["labels"] = (f"The label '{label}' exceeds the maximum length for a "
                                    "single label of 255 characters")
        if fields.get("description") is not None and not _is_adf(fields["description"]):
            errors["description"] = "Operation value must be an Atlassian Document (see the "
            errors["description"] += "Atlassian Document Format)"
        if errors:
            return _error(400, [], errors)
        number = self.counters.get(project, 4469) + 1
        self.counters[project] = number
        self.next_id += 1
        draft = "draft" in labels or (fields.get("status") or {}).get("name") == "Draft"
        now = time.strftime("%Y-%m-%dT%H:%M:%S.000+0000", time.gmtime())
        issue: Obj = {
            "id": str(self.next_id), "key": f"{project}-{number}", "project": project,
            "summary": summary, "issuetype": issuetype.get("name") or issuetype.get("id"),
            "labels": list(labels), "description": fields.get("description"),
            "status": "Draft" if draft else "Open", "resolution": None, "comments": [],
            "created": now, "updated": now,
        }
        self.issues[issue["key"]] = issue
        self._touch(issue)
        return web.json_response(
            {"id": issue["id"], "key": issue["key"],
             "self": f"{request.url.origin()}/rest/api/3/issue/{issue['id']}"}, status=201)

    async def get(self, request: web.Request) -> web.Response:
        issue = self._find(request)
        if issue is None:
            return _error(404, [_NOT_FOUND])
        fields = request.query.get("fields")
        return web.json_response(self._view(issue, request, fields.split(",") if fields else None))

    async def delete(self, request: web.Request) -> web.Response:
        issue = self._find(request)
        if issue is None:
            return _error(404, [_NOT_FOUND])
        issue["deleted"] = True
        del self.issues[issue["key"]]
        self.index.put(issue["id"], {**issue, "deleted": True})
        return web.Response(status=204)

    async def transitions(self, request: web.Request) -> web.Response:
        issue = self._find(request)
        if issue is None:
            return _error(404, [_NOT_FOUND])
        out = [
            {"id": tid, "name": name, "hasScreen": False, "isGlobal": False, "isInitial": False,
             "isAvailable": True, "isConditional": False, "isLooped": False,
             "to": {"id": _STATUS_IDS[to], "name": to, "statusCategory": _CATEGORY[to]}}
            for tid, (name, sources, to) in self._transitions().items()
            if issue["status"] in sources
        ]
        return web.json_response({"expand": "transitions", "transitions": out})

    async def transition(self, request: web.Request) -> web.Response:
        issue = self._find(request)
        if issue is None:
            return _error(404, [_NOT_FOUND])
        body = await request.json()
        tid = str((body.get("transition") or {}).get("id", ""))
        spec = self._transitions().get(tid)
        if spec is None or issue["status"] not in spec[1]:
            return _error(400, [f"Transition id '{tid}' is not valid for this issue."])
        issue["status"] = spec[2]
        resolution = ((body.get("fields") or {}).get("resolution") or {}).get("name")
        issue["resolution"] = (resolution or "Done") if spec[2] == "Done" else None
        for change in (body.get("update") or {}).get("comment", []):
            if "add" in change:
                issue["comments"].append(self._comment(issue, change["add"].get("body")))
        self._touch(issue)
        return web.Response(status=204)

    def _comment(self, issue: Obj, body: Any) -> Obj:
        now = time.strftime("%Y-%m-%dT%H:%M:%S.000+0000", time.gmtime())
        return {"id": str(10000 + sum(len(i["comments"]) for i in self.issues.values()) + 1),
                "body": body, "text": adf_text(body), "created": now, "updated": now,
                "jsdPublic": True}

    async def comment(self, request: web.Request) -> web.Response:
        issue = self._find(request)
        if issue is None:
            return _error(404, [_NOT_FOUND])
        body = (await request.json()).get("body")
        if not _is_adf(body):
            return _error(400, [], {"comment": "Comment body must be an Atlassian Document."})
        comment = self._comment(issue, body)
        issue["comments"].append(comment)
        self._touch(issue)
        return web.json_response(
            {**comment, "self": f"{request.url.origin()}/rest/api/3/issue/{issue['id']}/comment/"
             f"{comment['id']}"}, status=201)

    async def search(self, request: web.Request) -> web.Response:
        params: Obj = dict(request.query)
        if request.method == "POST":
            params = await request.json()
        fields = params.get("fields")
        if isinstance(fields, str):
            fields = fields.split(",")
        reconcile = params.get("reconcileIssues") or []
        if isinstance(reconcile, str):
            reconcile = reconcile.split(",")
        try:
            clauses = parse_jql(str(params.get("jql") or ""))
        except JqlError as exc:
            return _error(400, [str(exc)])
        ids = frozenset(str(i) for i in reconcile)
        hits = [i for i in self.index.visible(always=ids)
                if not i.get("deleted") and all(_jql_match(i, f, v) for f, v in clauses)]
        limit = int(params.get("maxResults") or 50)
        start = int(params.get("nextPageToken") or 0)
        page = hits[start:start + limit]
        more = len(hits) > start + limit
        out: Obj = {"issues": [self._view(i, request, fields or []) for i in page],
                    "isLast": not more}
        if more:
            out["nextPageToken"] = str(start + limit)
        return web.json_response(out)

    def _transitions(self) -> dict[str, tuple[str, tuple[str, ...], str]]:
        if self.config.accounts.jira_done_transition:
            return _TRANSITIONS
        return {tid: t for tid, t in _TRANSITIONS.items() if t[2] != "Done" and t[0] != "Reopen"}

    def _project(self, request: web.Request) -> str | None:
        key = request.match_info["project"]
        projects = self.config.accounts.jira_projects
        return key if key in projects else None

    async def myself(self, request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        if not auth.startswith("Basic "):
            return web.json_response({"errorMessages": ["You are not authenticated. "
                                                        "Authentication required to perform this "
                                                        "operation."], "errors": {}}, status=401)
        return web.json_response({
            "accountId": "5b10a2844c20165700ede21g", "accountType": "atlassian", "active": True,
            "displayName": "agentsaga", "timeZone": "Etc/UTC",
            "self": f"{request.url.origin()}/rest/api/3/user?accountId=5b10a2844c20165700ede21g",
        })

    async def project(self, request: web.Request) -> web.Response:
        key = self._project(request)
        if key is None:
            return _error(404, [f"No project could be found with key "
                                f"'{request.match_info['project']}'."])
        origin = request.url.origin()
        return web.json_response({
            "id": "10000", "key": key, "name": f"{key} support", "projectTypeKey": "software",
            "self": f"{origin}/rest/api/3/project/10000", "simplified": False, "style": "classic",
            "issueTypes": [{"id": tid, "name": name, "subtask": False,
                            "self": f"{origin}/rest/api/3/issuetype/{tid}"}
                           for tid, name in _ISSUE_TYPES.items()],
        })

    async def statuses(self, request: web.Request) -> web.Response:
        key = self._project(request)
        if key is None:
            return _error(404, [f"No project could be found with key "
                                f"'{request.match_info['project']}'."])
        origin = request.url.origin()
        names = ["Draft", "Open"] + (["Done"] if self.config.accounts.jira_done_transition else [])
        statuses = [{"id": _STATUS_IDS[n], "name": n, "description": "",
                     "iconUrl": f"{origin}/images/icons/statuses/generic.png",
                     "self": f"{origin}/rest/api/3/status/{_STATUS_IDS[n]}",
                     "statusCategory": {**_CATEGORY[n],
                                        "self": f"{origin}/rest/api/3/statuscategory/"
                                                f"{_CATEGORY[n]['id']}"}}
                    for n in names]
        return web.json_response([
            {"id": tid, "name": name, "subtask": False, "statuses": statuses,
             "self": f"{origin}/rest/api/3/issuetype/{tid}"}
            for tid, name in _ISSUE_TYPES.items()])

    async def createmeta(self, request: web.Request) -> web.Response:
        key = self._project(request)
        if key is None or request.match_info["type"] not in _ISSUE_TYPES:
            return _error(404, ["Issue type with id "
                                f"'{request.match_info['type']}' does not exist or is not "
                                "available in this project."])
        fields = [("summary", "Summary", True, {"type": "string", "system": "summary"}),
                  ("issuetype", "Issue Type", True, {"type": "issuetype", "system": "issuetype"}),
                  ("project", "Project", True, {"type": "project", "system": "project"}),
                  ("description", "Description", False, {"type": "string",
                                                         "system": "description"})]
        if self.config.accounts.jira_labels:
            fields.append(("labels", "Labels", False,
                           {"type": "array", "items": "string", "system": "labels"}))
        rows = [{"fieldId": fid, "key": fid, "name": name, "required": required,
                 "hasDefaultValue": False, "operations": ["set"], "schema": schema}
                for fid, name, required, schema in fields]
        return web.json_response({"fields": rows, "maxResults": 50, "startAt": 0,
                                  "total": len(rows)})

    async def removed(self, request: web.Request) -> web.Response:
        return _error(410, [_REMOVED])

    def truth(self) -> list[Obj]:
        return [
            {"system": "jira", "id": i["id"], "key": i["key"], "project": i["project"],
             "status": i["status"], "state": {"Draft": "draft", "Open": "open"}.get(
                 i["status"], "closed"), "labels": list(i["labels"]), "summary": i["summary"],
             "resolution": i["resolution"],
             "comments": [{"body": c["text"], "public": True} for c in i["comments"]]}
            for i in json.loads(json.dumps(list(self.issues.values())))
        ]


def _jql_match(issue: Obj, field: str, values: list[str]) -> bool:
    if field == "labels":
        return any(v in issue["labels"] for v in values)
    if field == "status":
        return issue["status"].lower() in [v.lower() for v in values]
    if field == "summary":
        return any(v.lower() in issue["summary"].lower() for v in values)
    return str(issue[field]) in values
