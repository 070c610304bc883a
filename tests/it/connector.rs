//! The MCP connector over HTTP: transport, authentication and per-call rechecks, scopes,
//! failed-token rate limit, audit.

use serde_json::json;

use crate::fixture::{McpClient, Seeded, TestServer, status_before_body, status_of_chunked_body};
use kennis::identity::{self, ConnectorAccess};

const INIT: &str = "initialize";

fn init_params(version: &str) -> serde_json::Value {
    json!({"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "it", "version": "1"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transport_methods_size_host_and_versions() {
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let token = t.grant(&s, &["kennisbank"]);
    let url = t.url("/mcp/kennisbank");
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        for auth in [true, false] {
            let mut r = t.client.request(method.clone(), &url);
            if auth {
                r = r.bearer_auth(&token);
            }
            let r = r.send().await.unwrap();
            assert_eq!(r.status(), 405, "{method}");
            assert_eq!(r.headers()["allow"], "POST");
        }
    }
    // Over 1 MB: 413 before anything is parsed (even before the token is looked at).
    let status = status_before_body(
        &url,
        &[("content-type", "application/json")],
        1024 * 1024 + 1,
    )
    .await;
    assert_eq!(status, 413);
    // DNS rebinding: a foreign Host or Origin is refused.
    let r = t
        .client
        .post(&url)
        .bearer_auth(&token)
        .header("host", "evil.example")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = t
        .client
        .post(&url)
        .bearer_auth(&token)
        .header("origin", "https://evil.example")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);

    let mut mcp = t.mcp(&token);
    for version in ["2025-06-18", "2025-11-25"] {
        mcp.version = version.into();
        let (status, body) = mcp.rpc(INIT, init_params(version)).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["result"]["protocolVersion"], version);
        let instructions = body["result"]["instructions"].as_str().unwrap();
        assert!(instructions.contains("Dutch"), "{instructions}");
        let (status, body) = mcp.rpc("tools/list", json!({})).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["result"]["tools"].as_array().unwrap().len(), 6);
        let (_, body) = mcp.rpc("ping", json!({})).await;
        assert!(body.get("result").is_some(), "{body}");
    }
    // The newest version has no initialize: discovery and calls stand alone.
    mcp.version = "2026-07-28".into();
    let meta = json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientInfo": {"name": "it", "version": "1"}, "io.modelcontextprotocol/clientCapabilities": {}}});
    let (status, body) = mcp.rpc("server/discover", meta.clone()).await;
    assert_eq!(status, 200, "{body}");
    let versions = body["result"]["supportedVersions"].to_string();
    assert!(
        versions.contains("2026-07-28") && versions.contains("2025-06-18"),
        "{body}"
    );
    let (status, body) = mcp.rpc("tools/list", meta).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body["result"]["tools"]
            .as_array()
            .is_some_and(|t| t.len() == 6),
        "{body}"
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_per_call_rechecks() {
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let token = t.grant(&s, &["kennisbank"]);
    let url = t.url("/mcp/kennisbank");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    let post = |tok: Option<String>| {
        let mut r = t
            .client
            .post(&url)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .json(&body);
        if let Some(tok) = tok {
            r = r.bearer_auth(tok);
        }
        r.send()
    };
    let r = post(None).await.unwrap();
    assert_eq!(r.status(), 401);
    let challenge = r.headers()["www-authenticate"].to_str().unwrap().to_owned();
    assert!(challenge.starts_with("Bearer "), "{challenge}");
    assert!(
        challenge.contains("scope=\"kennisbank feature_requests\""),
        "{challenge}"
    );
    assert!(
        challenge.contains(&format!(
            "resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp/kennisbank\"",
            t.base
        )),
        "{challenge}"
    );

    let r = post(Some("kb_at_wrong".into())).await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(
        r.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .contains("error=\"invalid_token\"")
    );
    assert_eq!(post(Some(token.clone())).await.unwrap().status(), 200);

    // Each per-call check, broken and mended in turn.
    let app = t.app().clone();
    let store = &app.store;
    let expect_reason = |reason: &'static str| {
        let tok = token.clone();
        let fut = post(Some(tok));
        async move {
            let r = fut.await.unwrap();
            assert_eq!(r.status(), 401, "{reason}");
            let h = r.headers()["www-authenticate"].to_str().unwrap().to_owned();
            assert!(
                h.contains(&format!("error_description=\"{reason}\"")),
                "{h}"
            );
            let b: serde_json::Value = r.json().await.unwrap();
            assert_eq!(b["error_description"], reason);
        }
    };
    identity::set_org_policy(
        store,
        &kennis::audit::Actor::Operator,
        &s.org.slug,
        Some(ConnectorAccess::Nobody),
        None,
        app.clock.now(),
    )
    .unwrap();
    expect_reason("connecting not allowed").await;
    identity::set_org_policy(
        store,
        &kennis::audit::Actor::Operator,
        &s.org.slug,
        Some(ConnectorAccess::SelectedMembers),
        None,
        app.clock.now(),
    )
    .unwrap();
    assert_eq!(
        post(Some(token.clone())).await.unwrap().status(),
        200,
        "seeded member may connect"
    );
    identity::add_member(
        store,
        &s.org.slug,
        &s.person.email,
        identity::Role::Admin,
        false,
        app.clock.now(),
    )
    .unwrap();
    expect_reason("connecting not allowed").await;
    identity::set_org_policy(
        store,
        &kennis::audit::Actor::Operator,
        &s.org.slug,
        Some(ConnectorAccess::AllMembers),
        None,
        app.clock.now(),
    )
    .unwrap();
    identity::accept_terms(store, s.person.id, "0-old").unwrap();
    expect_reason("terms not accepted").await;
    identity::accept_terms(store, s.person.id, &app.config.terms_version).unwrap();
    identity::reset_totp(store, &s.person.email).unwrap();
    expect_reason("second factor required").await;
    identity::set_org_policy(
        store,
        &kennis::audit::Actor::Operator,
        &s.org.slug,
        None,
        Some(false),
        app.clock.now(),
    )
    .unwrap();
    assert_eq!(
        post(Some(token.clone())).await.unwrap().status(),
        200,
        "organisation no longer asks for a second factor"
    );
    // The membership alone goes (the portal's removal also revokes the grants): the per-call
    // check itself must refuse. Someone else stays admin.
    let other = t.seed(&s.org.name, "second-admin@example.org");
    assert_eq!(other.org.id, s.org.id);
    store
        .write(|tx| identity::remove_member_in(tx, s.org.id, s.person.id))
        .unwrap();
    expect_reason("not a member").await;

    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_failed_token_checks_get_429_until_the_window_moves() {
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let good = t.grant(&s, &["kennisbank"]);
    let url = t.url("/mcp/kennisbank");
    for i in 0..300 {
        let r = t
            .client
            .post(&url)
            .bearer_auth(format!("kb_at_bad{i}"))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "attempt {i}");
    }
    let r = t
        .client
        .post(&url)
        .bearer_auth("kb_at_bad")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=900).contains(&retry), "{retry}");
    // While blocked, the address gets 429 whatever it sends.
    let mcp = t.mcp(&good);
    assert_eq!(mcp.rpc("tools/list", json!({})).await.0, 429);
    t.clock
        .advance(jiff::SignedDuration::from_secs(retry as i64));
    assert_eq!(mcp.rpc("tools/list", json!({})).await.0, 200);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_outside_the_grants_scopes_do_not_exist() {
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let only_requests = t.mcp(&t.grant(&s, &["feature_requests"]));
    assert_eq!(
        only_requests.tool_names().await,
        crate::requests::FEATURE_TOOLS
    );
    only_requests.unknown("kennisbank_list", json!({})).await;
    let kb = t.mcp(&t.grant(&s, &["kennisbank"]));
    let (_, body) = kb
        .rpc(
            "tools/call",
            json!({"name": "no_such_tool", "arguments": {}}),
        )
        .await;
    assert!(body.get("error").is_some(), "{body}");
    t.stop().await;
}

/// A server with one organisation whose admin is connected (`kennisbank`) and has written
/// `aangeleverd/a.md` ("hallo") through the connector.
async fn with_one_document() -> (TestServer, Seeded, McpClient) {
    let t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let token = t.grant(&s, &["kennisbank"]);
    let mcp = t.mcp(&token);
    mcp.ok(
        "kennisbank_write",
        json!({"path": "aangeleverd/a.md", "content": "hallo"}),
    )
    .await;
    (t, s, mcp)
}

/// A tool that fails inside the server (here a document's record that cannot be read) answers
/// an error result with the code `internal` and says no more: not the table, not what could
/// not be read — that goes to the server's log. Neither does the audit log, which an
/// organisation's admins read. Once the record reads again, so does the tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_inside_the_server_is_not_described_to_the_caller() {
    use kennis::store::KB_DOCS;
    let (mut t, s, mcp) = with_one_document().await;
    let k = kennis::kb::doc_key(s.org.id, "aangeleverd/a.md");
    let kept = t.damage_record(KB_DOCS, &k);
    let r = mcp
        .call("kennisbank_read", json!({"path": "aangeleverd/a.md"}))
        .await;
    assert_eq!(r["isError"], true, "{r}");
    let error = &r["structuredContent"]["error"];
    assert_eq!(error["code"], "internal", "{r}");
    let shown = r.to_string();
    for detail in ["kb_docs", "corrupt", "compressed", "frame"] {
        assert!(!shown.contains(detail), "{detail}: {r}");
    }
    let records = t.audit_records(s.org.id);
    let failed = records
        .iter()
        .find(|r| r.tool == "kennisbank_read")
        .expect("the failed call is audited");
    assert_eq!(failed.outcome, kennis::audit::Outcome::Error);
    let said = failed.error.as_deref().unwrap_or_default();
    assert!(said.contains("internal error"), "{failed:?}");
    for detail in ["kb_docs", "corrupt", "compressed", "frame"] {
        assert!(!said.contains(detail), "{detail}: {failed:?}");
    }
    t.restore_record(KB_DOCS, &k, &kept);
    let r = mcp
        .ok("kennisbank_read", json!({"path": "aangeleverd/a.md"}))
        .await;
    assert!(r.to_string().contains("hallo"), "{r}");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_call_is_audited() {
    let (mut t, s, mcp) = with_one_document().await;
    mcp.err(
        "kennisbank_write",
        json!({"path": "elders/a.md", "content": "hallo"}),
    )
    .await;
    mcp.ok("kennisbank_list", json!({})).await;
    // The tool calls (the seeding's admin actions are audited too, with an `action`).
    let records: Vec<_> = t
        .audit_records(s.org.id)
        .into_iter()
        .filter(|r| r.action.is_none())
        .collect();
    assert_eq!(records.len(), 3, "{records:?}");
    let r0 = &records[0];
    assert_eq!(
        (r0.tool.as_str(), r0.outcome),
        ("kennisbank_write", kennis::audit::Outcome::Ok)
    );
    assert_eq!(r0.target.as_deref(), Some("aangeleverd/a.md"));
    assert_eq!((r0.org_id, r0.person_id), (s.org.id, s.person.id));
    assert!(r0.duration_ms >= 0.0);
    assert_eq!(records[1].outcome, kennis::audit::Outcome::Refused);
    assert!(
        records[1].error.as_deref().unwrap().contains("outside"),
        "{:?}",
        records[1]
    );
    assert_eq!(records[1].target.as_deref(), Some("elders/a.md"));
    // Another organisation's export is empty; the CLI writes JSON lines.
    let dir = t.data_dir().to_owned();
    let slug = s.org.slug.clone();
    let out = tokio::task::spawn_blocking(move || {
        crate::fixture::run(&dir, &["audit", "export", &slug], None)
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", crate::fixture::stderr(&out));
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|l| l.get("action").is_none())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[2]["tool"], "kennisbank_list");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_has_a_title_and_annotations() {
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let token = t.grant(&s, &["kennisbank", "feature_requests"]);
    let mcp = t.mcp(&token);
    let (status, body) = mcp.rpc("tools/list", json!({})).await;
    assert_eq!(status, 200, "{body}");
    let tools = body["result"]["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 11, "{body}");
    let read_only = [
        "kennisbank_list",
        "kennisbank_read",
        "kennisbank_search",
        "search",
        "fetch",
        "app_list",
        "feature_request_list",
        "feature_request_read",
    ];
    for tool in tools {
        let name = tool["name"].as_str().unwrap();
        let title = tool["title"].as_str().unwrap_or_default();
        assert!(!title.is_empty(), "{name} has no title");
        let a = &tool["annotations"];
        assert_eq!(a["readOnlyHint"], read_only.contains(&name), "{name}: {a}");
        assert_eq!(a["destructiveHint"], false, "{name}: {a}");
        assert_eq!(a["openWorldHint"], false, "{name}: {a}");
    }
    t.stop().await;
}

/// A plain `tools/call` is answered by the connector itself, without the SDK's per-request
/// tasks (`connector::direct`): its reply must be the SDK's, byte for byte. Each call goes
/// once in the plain shape and once with a media-type parameter, which sends it through the
/// SDK; ids of both kinds, every version before 2026-07-28 (and none), results and tool errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_call_is_answered_exactly_as_the_sdk_answers_it() {
    let (mut t, s, mcp) = with_one_document().await;
    let calls = [
        json!({"name": "kennisbank_read", "arguments": {"path": "aangeleverd/a.md"}}),
        json!({"name": "kennisbank_list", "arguments": {"path": "aangeleverd"}}),
        json!({"name": "kennisbank_search", "arguments": {"query": "hallo"}}),
        json!({"name": "kennisbank_read", "arguments": {"path": "aangeleverd/none.md"}}),
        json!({"name": "kennisbank_read", "arguments": {"path": 7}}),
        json!({"name": "kennisbank_read"}),
        json!({"name": "feature_request_list", "arguments": {}}),
    ];
    let versions = [
        None,
        Some("2024-11-05"),
        Some("2025-03-26"),
        Some("2025-06-18"),
        Some("2025-11-25"),
    ];
    for (n, (params, version)) in calls.iter().zip(versions.iter().cycle()).enumerate() {
        for id in [json!(n), json!(format!("call-{n}"))] {
            let body =
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
            let post = |accept: &'static str| {
                let mut r = t
                    .client
                    .post(&mcp.url)
                    .bearer_auth(&mcp.token)
                    .header("accept", accept)
                    .json(&body);
                if let Some(v) = version {
                    r = r.header("mcp-protocol-version", *v);
                }
                async move {
                    let r = r.send().await.unwrap();
                    let status = r.status().as_u16();
                    let kind = r.headers()["content-type"].to_str().unwrap().to_owned();
                    (status, kind, r.bytes().await.unwrap())
                }
            };
            let direct = post("application/json, text/event-stream").await;
            let sdk = post("application/json;q=1, text/event-stream").await;
            assert_eq!(direct.0, 200, "{params} {version:?}");
            assert_eq!(direct.1, "application/json");
            assert_eq!(
                (direct.0, &direct.1, String::from_utf8_lossy(&direct.2)),
                (sdk.0, &sdk.1, String::from_utf8_lossy(&sdk.2)),
                "{params} {version:?}"
            );
            let reply: serde_json::Value = serde_json::from_slice(&direct.2).unwrap();
            assert_eq!(reply["id"], id);
        }
    }
    // The connector answers the plain ones itself and hands the others on.
    let caller = kennis::tools::Caller::person(s.org.id, s.person.id, 1, vec!["kennisbank".into()]);
    let direct = |body: serde_json::Value| {
        let app = t.app().clone();
        let caller = caller.clone();
        async move {
            let body = axum::body::Bytes::from(body.to_string());
            kennis::connector::direct::answer(&app, &caller, &body).await
        }
    };
    let read = json!({"name": "kennisbank_read", "arguments": {"path": "aangeleverd/a.md"}});
    let answer = direct(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": read}))
        .await
        .expect("a plain call is answered directly");
    let bytes = axum::body::to_bytes(answer.into_body(), 1 << 20)
        .await
        .unwrap();
    let reply: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        reply["result"]["structuredContent"]["excerpt"], "hallo",
        "{reply}"
    );
    for handed_on in [
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {}}),
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "app_list"}}),
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "kennisbank_read", "arguments": {"path": "aangeleverd/a.md"}, "_meta": {"progressToken": 1}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"id": 5, "method": "tools/call", "params": read}),
        json!({"jsonrpc": "1.0", "id": 5, "method": "tools/call", "params": read}),
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "kennisbank_read", "arguments": {"path": "aangeleverd/a.md"}, "requestState": "x"}}),
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "kennisbank_read", "arguments": ["aangeleverd/a.md"]}}),
    ] {
        assert!(direct(handed_on.clone()).await.is_none(), "{handed_on}");
    }
    // Calls the SDK answers (no tool of the grant, a request in 2026-07-28's shape, a
    // notification) still get its answers.
    mcp.unknown("app_list", json!({})).await;
    let (status, _) = mcp
        .send(
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            &[],
        )
        .await;
    assert_eq!(status, 202);
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientInfo": {"name": "it", "version": "1"}, "io.modelcontextprotocol/clientCapabilities": {}});
    let mut modern = t.mcp(&mcp.token);
    modern.version = "2026-07-28".into();
    let (status, body) = modern
        .send(
            &json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"_meta": meta, "name": "kennisbank_read", "arguments": {"path": "aangeleverd/a.md"}}}),
            &[("mcp-method", "tools/call"), ("mcp-name", "kennisbank_read")],
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["result"]["structuredContent"]["excerpt"], "hallo",
        "{body}"
    );
    t.stop().await;
}

/// A body sent in chunks (no length given) that grows past 1 MB is refused with 413 and not
/// read on, whether the connector would answer the call itself or hand it to the SDK (a
/// weighted `Accept`), and the server goes on answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_past_the_limit_is_refused() {
    let (mut t, _s, mcp) = with_one_document().await;
    let bearer = format!("Bearer {}", mcp.token);
    for accept in [
        "application/json, text/event-stream",
        "application/json;q=1, text/event-stream",
    ] {
        let headers = [
            ("authorization", bearer.as_str()),
            ("accept", accept),
            ("content-type", "application/json"),
        ];
        // 17 chunks of 64 KiB: past 1 MB.
        let status = status_of_chunked_body(&mcp.url, &headers, 17).await;
        assert_eq!(status, 413, "{accept}");
    }
    // The document is as it was, and the server answers the next call.
    let doc = mcp
        .ok("kennisbank_read", json!({"path": "aangeleverd/a.md"}))
        .await;
    assert_eq!(doc["excerpt"], "hallo");
    t.stop().await;
}
