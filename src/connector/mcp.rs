//! The MCP handler served by `rmcp`: server info with instructions, and `tools/list` and
//! `tools/call` filtered by the grant's scopes. The authenticated [`Caller`] arrives in the
//! HTTP request's extensions, which `rmcp` hands through as `http::request::Parts`.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    Implementation, JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use serde_json::{Value, json};

use crate::app::App;
use crate::tools::{self, Caller, TOOLS, ToolSpec, tool_for};

/// What the assistant is told about this server.
pub const INSTRUCTIONS: &str = "kennis gives you access to one organisation's knowledge base and, with the feature_requests scope, its feature requests, acting as the person who connected you. The material is mostly written in Dutch: search with Dutch terms as they appear in the documents, and write new documents, feature requests and replies in the language of the material (usually Dutch). Knowledge base: start with kennisbank_list or kennisbank_search, then kennisbank_read the documents you need; new documents go in `aangeleverd/`. Feature requests: app_list shows the apps (only live apps accept requests); feature_request_create files one, an agent works on it and may ask multiple-choice questions; feature_request_read shows the conversation and open questions, feature_request_reply answers them or adds a message.";

#[derive(Clone)]
pub struct KennisMcp {
    pub app: Arc<App>,
}

fn caller_of(ctx: &RequestContext<RoleServer>) -> Result<Caller, ErrorData> {
    ctx.extensions
        .get::<axum::http::request::Parts>()
        .and_then(|p| p.extensions.get::<Caller>())
        .cloned()
        .ok_or_else(|| {
            ErrorData::internal_error("request reached the MCP handler unauthenticated", None)
        })
}

fn as_object(v: Value) -> Arc<serde_json::Map<String, Value>> {
    match v {
        Value::Object(m) => Arc::new(m),
        _ => Arc::new(serde_json::Map::new()),
    }
}

/// A tool's output schema widened to also describe its error results
/// (`{"error": {"code", "message", …}}`, DESIGN.md "Tool results"): clients such as the
/// official TypeScript SDK validate `structuredContent` of error results too, and would
/// otherwise turn a helpful refusal into a schema failure.
pub fn with_error_shape(mut output: Value) -> Value {
    let Value::Object(schema) = &mut output else {
        return output;
    };
    let required = schema.remove("required").unwrap_or_else(|| json!([]));
    if let Some(Value::Object(props)) = schema.get_mut("properties") {
        props.insert(
            "error".into(),
            json!({"type": "object", "properties": {
                "code": {"type": "string"}, "message": {"type": "string"},
                "retry_after_seconds": {"type": "integer"}, "current_version": {"type": "integer"}},
                "required": ["code", "message"]}),
        );
    }
    schema.insert(
        "anyOf".into(),
        json!([{"required": required}, {"required": ["error"]}]),
    );
    output
}

/// What clients are told about a tool's effects: writes keep versions (never destructive),
/// and no tool reaches beyond this service.
fn annotations(spec: &tools::ToolSpec) -> ToolAnnotations {
    ToolAnnotations::with_title(spec.title)
        .read_only(spec.read_only)
        .destructive(false)
        .open_world(false)
}

/// The tool definitions the caller's scopes unlock; `with_extracted`: the server reads and
/// searches the text of PDF and Office files.
pub fn visible_tools(caller: &Caller, with_extracted: bool) -> Vec<Tool> {
    tools::definitions(with_extracted)
        .into_iter()
        .filter_map(|(name, description, input, output)| {
            let spec = tool_for(caller, name)?;
            Some(
                Tool::new(name, description, as_object(input))
                    .with_title(spec.title)
                    .with_annotations(annotations(spec))
                    .with_raw_output_schema(as_object(with_error_shape(output))),
            )
        })
        .collect()
}

impl ServerHandler for KennisMcp {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        info.server_info = Implementation::new("kennis", env!("CARGO_PKG_VERSION"));
        info.instructions = Some(INSTRUCTIONS.to_owned());
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let caller = caller_of(&ctx)?;
        let tools = visible_tools(&caller, self.app.kb_index.with_extracted());
        debug_assert!(TOOLS.len() >= tools.len());
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = caller_of(&ctx)?;
        let Some(tool) = tool_for(&caller, &request.name) else {
            // A tool outside the grant's scopes does not exist for it.
            return Err(ErrorData::invalid_params(
                format!("Unknown tool: {}", request.name),
                None,
            ));
        };
        let args = request.arguments.unwrap_or_default();
        Ok(run_tool(&self.app, caller, tool, args).await.into())
    }
}

/// Runs `tool` for `caller` (inline when it is quick, else on a blocking thread) and shapes
/// what it returned as MCP's result: the text in `content`, the facts in `structuredContent`,
/// a refusal as a result with `isError`. The SDK's handler and the connector's direct answer
/// ([`super::direct`]) both call it.
pub async fn run_tool(
    app: &Arc<App>,
    caller: Caller,
    tool: &'static ToolSpec,
    args: JsonObject,
) -> CallToolResult {
    let result = if tool.quick {
        tools::call(app, &caller, tool, &args)
    } else {
        app.blocking(move |app| tools::call(app, &caller, tool, &args))
            .await
    };
    let mut out = match result {
        Ok(ok) => {
            let mut r = CallToolResult::success(vec![ContentBlock::text(ok.text)]);
            r.structured_content = Some(ok.structured);
            r
        }
        Err(e) => {
            let mut r = CallToolResult::error(vec![ContentBlock::text(e.to_string())]);
            r.structured_content = Some(e.structured());
            r
        }
    };
    out.meta = None;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_output_schema_also_admits_the_error_shape() {
        for (name, _, _, output) in super::tools::definitions(true) {
            let required = output["required"].clone();
            let wide = with_error_shape(output);
            assert!(wide.get("required").is_none(), "{name}");
            assert_eq!(wide["anyOf"][0]["required"], required, "{name}");
            assert_eq!(wide["anyOf"][1]["required"], json!(["error"]), "{name}");
            assert_eq!(
                wide["properties"]["error"]["required"],
                json!(["code", "message"])
            );
            assert_eq!(wide["type"], "object", "{name}");
        }
    }
}
