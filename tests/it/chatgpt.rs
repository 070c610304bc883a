//! ChatGPT's `search` and `fetch` (issue 23): the names and shapes its company knowledge and
//! deep research require, built on `kennisbank_search` / `kennisbank_read` (same rules,
//! limits and audit), through the real server and the fixture's MCP client.

use serde_json::{Value, json};

use crate::documents::{upload_offer, wait_extracted};
use crate::fixture::{TestServer, sorted_keys};

/// The one text item is the structured content, as JSON.
fn text_is_structured(result: &Value) {
    let content = result["content"].as_array().unwrap();
    assert_eq!(content.len(), 1, "{result}");
    assert_eq!(content[0]["type"], "text");
    let parsed: Value = serde_json::from_str(content[0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(parsed, result["structuredContent"], "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_and_fetch_have_chatgpts_shapes_and_annotations() {
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    t.put_doc(
        &s,
        "handleidingen/kozijn onderhoud.md",
        "# Onderhoud\nKozijnen jaarlijks schilderen.\nMeranti houdt lang.\n",
    );
    t.put_doc(&s, "notities/overig.md", "Niets over ramen.\n");
    let mcp = t.mcp(&t.grant(&s, &["kennisbank"]));

    // tools/list: both read-only, titled, never destructive or open-world, with schemas.
    let (status, body) = mcp.rpc("tools/list", json!({})).await;
    assert_eq!(status, 200, "{body}");
    let tools = body["result"]["tools"].as_array().unwrap();
    for name in ["search", "fetch"] {
        let tool = tools
            .iter()
            .find(|x| x["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing: {body}"));
        assert!(!tool["title"].as_str().unwrap_or_default().is_empty());
        let a = &tool["annotations"];
        assert_eq!(
            (
                &a["readOnlyHint"],
                &a["destructiveHint"],
                &a["openWorldHint"]
            ),
            (&json!(true), &json!(false), &json!(false)),
            "{name}: {a}"
        );
        assert!(tool["outputSchema"].is_object(), "{tool}");
    }
    let search = tools.iter().find(|x| x["name"] == "search").unwrap();
    assert_eq!(search["inputSchema"]["required"], json!(["query"]));
    let fetch = tools.iter().find(|x| x["name"] == "fetch").unwrap();
    assert_eq!(fetch["inputSchema"]["required"], json!(["id"]));

    // search → {results: [{id, title, url}]}: exactly these fields.
    let r = mcp
        .call("search", json!({"query": "kozijn schilderen"}))
        .await;
    assert_ne!(r["isError"], true, "{r}");
    text_is_structured(&r);
    let out = &r["structuredContent"];
    assert_eq!(out.as_object().unwrap().len(), 1, "{out}");
    let results = out["results"].as_array().unwrap();
    assert_eq!(results.len(), 1, "{out}");
    let hit = &results[0];
    assert_eq!(sorted_keys(hit), ["id", "title", "url"]);
    assert_eq!(hit["id"], "handleidingen/kozijn onderhoud.md");
    assert_eq!(hit["title"], "kozijn onderhoud.md");
    let url = format!(
        "{}/portal/o/{}/kb/handleidingen/kozijn%20onderhoud.md",
        t.base, s.org.slug
    );
    assert_eq!(hit["url"], url.as_str());
    // The URL is the document's portal page: without a session it asks for a login.
    let page = t.client.get(&url).send().await.unwrap();
    assert_eq!(page.status(), 303);
    assert!(
        page.headers()["location"]
            .to_str()
            .unwrap()
            .starts_with("/login"),
        "{:?}",
        page.headers()
    );
    let none = mcp.ok("search", json!({"query": "dakgoot"})).await;
    assert_eq!(none, json!({"results": []}));

    // fetch → {id, title, text, url, metadata}.
    let r = mcp
        .call("fetch", json!({"id": "handleidingen/kozijn onderhoud.md"}))
        .await;
    assert_ne!(r["isError"], true, "{r}");
    text_is_structured(&r);
    let doc = &r["structuredContent"];
    assert_eq!(sorted_keys(doc), ["id", "metadata", "text", "title", "url"]);
    assert_eq!(doc["id"], "handleidingen/kozijn onderhoud.md");
    assert_eq!(doc["title"], "kozijn onderhoud.md");
    assert_eq!(doc["url"], url.as_str());
    assert_eq!(
        doc["text"],
        "# Onderhoud\nKozijnen jaarlijks schilderen.\nMeranti houdt lang.\n"
    );
    assert_eq!(doc["metadata"]["truncated"], false);
    assert_eq!(doc["metadata"]["version"], 1);
    assert_eq!(doc["metadata"]["kind"], "text");

    // A binary file without text (an image): a sentence with its download link.
    t.put_doc(&s, "fotos/gevel.png", "\u{89}PNG nep");
    let img = mcp.ok("fetch", json!({"id": "fotos/gevel.png"})).await;
    let link = img["metadata"]["download_url"].as_str().unwrap();
    assert!(link.contains("/files/"), "{img}");
    let text = img["text"].as_str().unwrap();
    assert!(text.contains("binary") && text.contains(link), "{img}");
    assert_eq!(img["metadata"]["kind"], "binary");
    assert_eq!(img["metadata"]["extracted"], false);

    // An unknown id (and a malformed one) is a tool error, and the server goes on.
    let e = mcp.err("fetch", json!({"id": "nergens/niets.md"})).await;
    assert_eq!(e["code"], "not_found", "{e}");
    assert!(e["message"].as_str().unwrap().contains("search"), "{e}");
    let e = mcp.err("fetch", json!({"id": "../geheim.md"})).await;
    assert_eq!(e["code"], "invalid_input", "{e}");
    let e = mcp.err("fetch", json!({})).await;
    assert_eq!(e["code"], "invalid_input", "{e}");
    let e = mcp.err("search", json!({"query": "x"})).await;
    assert_eq!(e["code"], "invalid_input", "{e}");
    assert_eq!(
        mcp.ok("search", json!({"query": "meranti"})).await["results"][0]["id"],
        "handleidingen/kozijn onderhoud.md"
    );

    // Audited like the other tools, under their own names, naming the document.
    let records = t.audit_records(s.org.id);
    let fetches: Vec<_> = records.iter().filter(|r| r.tool == "fetch").collect();
    assert_eq!(fetches.len(), 5, "{records:?}");
    assert_eq!(
        fetches[0].target.as_deref(),
        Some("handleidingen/kozijn onderhoud.md")
    );
    assert_eq!(fetches[0].outcome, kennis::audit::Outcome::Ok);
    assert_eq!(fetches[2].target.as_deref(), Some("nergens/niets.md"));
    assert_eq!(fetches[2].outcome, kennis::audit::Outcome::Refused);
    assert_eq!(records.iter().filter(|r| r.tool == "search").count(), 4);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_and_fetch_exist_only_with_the_kennisbank_scope() {
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    t.put_doc(&s, "a.md", "kozijn\n");
    let requests_only = t.mcp(&t.grant(&s, &["feature_requests"]));
    let names = requests_only.tool_names().await;
    assert!(
        !names.iter().any(|n| n == "search" || n == "fetch"),
        "{names:?}"
    );
    for (tool, args) in [
        ("search", json!({"query": "kozijn"})),
        ("fetch", json!({"id": "a.md"})),
    ] {
        requests_only.unknown(tool, args).await;
    }
    let kb = t.mcp(&t.grant(&s, &["kennisbank"]));
    let names = kb.tool_names().await;
    assert!(names.contains(&"search".to_owned()) && names.contains(&"fetch".to_owned()));
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_gives_a_pdfs_extracted_text_and_cuts_long_text() {
    let mut t = TestServer::start().await;
    let s = upload_offer(&t).await;
    wait_extracted(&t, s.org.id, &["offertes/text.pdf".to_owned()]).await;
    let mcp = t.mcp(&t.grant(&s, &["kennisbank"]));

    let found = mcp.ok("search", json!({"query": "Zeestraat"})).await;
    assert_eq!(found["results"][0]["id"], "offertes/text.pdf", "{found}");
    let doc = mcp.ok("fetch", json!({"id": "offertes/text.pdf"})).await;
    assert!(
        doc["text"]
            .as_str()
            .unwrap()
            .contains("Offerte kozijnen Zeestraat"),
        "{doc}"
    );
    assert!(!doc["text"].as_str().unwrap().starts_with("%PDF"));
    let m = &doc["metadata"];
    assert_eq!(
        (&m["kind"], &m["extracted"], &m["content_type"]),
        (&json!("binary"), &json!(true), &json!("application/pdf")),
        "{m}"
    );
    assert!(m["download_url"].as_str().unwrap().contains("/files/"));

    // Longer than the read tool's limit (20,000 characters): cut there, and said so.
    let long: String = (0..3000).map(|i| format!("regel {i:05}\n")).collect();
    assert!(long.chars().count() > 20_000);
    t.put_doc(&s, "lang.md", &long);
    let doc = mcp.ok("fetch", json!({"id": "lang.md"})).await;
    let text = doc["text"].as_str().unwrap();
    assert_eq!(text.chars().count(), 20_000);
    assert!(long.starts_with(text));
    assert_eq!(doc["metadata"]["truncated"], true);
    assert_eq!(
        doc["metadata"]["total_chars"].as_u64().unwrap(),
        long.chars().count() as u64
    );
    t.stop().await;
}
