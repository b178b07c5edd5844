//! The OpenAPI 3.1 document, generated from the code: each handler's `#[utoipa::path]`
//! attribute gives its operation, and the request and response types derive `ToSchema`. It is
//! served at `/openapi.json`, and read by the Swagger UI at `/docs/` ([`crate::routes::docs`]).
//!
//! What the layers in front of the handlers answer (src/routes/mod.rs) is added by `Layers`,
//! from the same facts that mount them, so no handler repeats it. The integration test
//! `tests/it/openapi.rs` holds the document to the routes that are mounted.
//!
//! This file only assembles: it lists the paths, the shared components and the tags. Every
//! request and response type sits beside its handler, and nothing but the docs route reads
//! this module.

use utoipa::Number;
use utoipa::openapi::content::Content;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{Operation, ParameterBuilder, ParameterIn, PathItem};
use utoipa::openapi::schema::{Array, ArrayItems, Object, ObjectBuilder, Schema};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{
    ContentBuilder, OpenApi as Document, Ref, RefOr, Required, Response, ResponseBuilder, Type,
};
use utoipa::{Modify, OpenApi};

use crate::config::AgentSection;
use crate::error::{ErrorBody, ErrorCode};
use crate::extract::{Items, Range, Rules as RequestRules};
use crate::models::Models;
use crate::routes;

/// The security scheme names: either header carries the key (docs/api.md, "Authentication").
pub const BEARER: &str = "bearer";
pub const API_KEY: &str = "api_key";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "kbq",
        version = env!("CARGO_PKG_VERSION"),
        description = "Knowledge base query service and agent runtime. Every route under \
            `/data/v1`, `/v1` and `/admin/v1` needs an API key, sent as `Authorization: Bearer KEY` or \
            `X-API-Key: KEY`; a security requirement's list names the scope the route needs \
            (`admin` holds every scope). Every key belongs to one workspace, whose knowledge \
            it works in; an `admin` key of `default` may name another in `X-KBQ-Workspace`. \
            The probes and this document need no key. Every error \
            has the `ErrorBody` shape. docs/api.md has the rules that a schema cannot say. \
            kbq also serves a web page at `/ui/` (docs/ui.md), which signs in with a key and \
            calls these routes; it is a page for people, not an operation, so it is not in \
            `paths`."
    ),
    paths(
        routes::graph::traverse,
        routes::graph::search,
        routes::graph::entity,
        routes::graph::documents,
        routes::graph::merges,
        routes::graph::stats,
        routes::key::show,
        routes::rag::semantic,
        routes::rag::keyword,
        routes::rag::hybrid,
        routes::ingest::entities,
        routes::ingest::relationships,
        routes::ingest::documents,
        routes::ingest::ndjson,
        routes::ingest::delete_entity,
        routes::ingest::delete_document,
        routes::sources::submit,
        routes::sources::job,
        routes::sources::events,
        routes::sources::cancel,
        routes::sources::retract,
        routes::sources::list,
        routes::agent::chat,
        routes::agent::health,
        routes::completions::completions,
        routes::openai::models,
        routes::openai::embeddings,
        routes::admin::create,
        routes::admin::list,
        routes::admin::show,
        routes::admin::delete,
        routes::admin::set_quota,
        routes::admin::mint,
        routes::admin::keys,
        routes::admin::revoke,
        routes::admin::export,
        routes::probes::livez,
        routes::probes::readyz,
        crate::metrics::metrics,
        routes::docs::openapi_json,
    ),
    // The payloads of a streamed agent chat's events, which `ChatEvent` names but, as JSON in
    // a string, cannot reference.
    components(schemas(
        ErrorBody,
        ErrorCode,
        routes::agent::ChatDelta,
        kbq_actors::ToolCallStarted,
        kbq_actors::ToolCallCompleted,
    )),
    modifiers(&Layers, &Rules),
    tags(
        (name = "graph", description = "Graph queries under `/data/v1/query/graph` (scope `read`)"),
        (name = "rag", description = "Document retrieval under `/v1/rag` (scope `read`); no language model"),
        (name = "ingest", description = "Upserts and deletes under `/data/v1/ingest` (scope `write`)"),
        (name = "agent", description = "The tool-using agent under `/v1/agent`"),
        (name = "key", description = "The calling key, at `/v1/key`: any key"),
        (name = "openai", description = "OpenAI-compatible shapes under `/v1` (scope `read`; `agent` for chat completions)"),
        (name = "admin", description = "Workspaces and their keys under `/admin/v1`: an `admin` key of the `default` workspace"),
        (name = "probes", description = "Liveness and readiness for load balancers; no key"),
        (name = "docs", description = "This document; no key. The Swagger UI at `/docs/` reads it."),
    )
)]
pub struct ApiDoc;

/// The document as the server serves it: [`ApiDoc`] with the rules that come from the config
/// and the served models stated too, from the values the handlers check with: the agent's
/// bounds (`[agent]`), the model names of chat completions, and the embedder's name and
/// dimension.
pub struct Live<'a> {
    pub agent: &'a AgentSection,
    pub models: &'a Models,
    /// The embedder's name, its dimension, and whether it can return fewer.
    pub embedder: (&'a str, usize, bool),
}

impl Live<'_> {
    /// The document, as JSON.
    pub fn document(&self) -> serde_json::Result<String> {
        use routes::agent::{ChatRequest, TEMPERATURE};
        use routes::openai;
        let mut doc = serde_json::to_value(ApiDoc::openapi())?;
        let schemas = &mut doc["components"]["schemas"];
        let limits = self.agent;
        let length = limits.max_message_chars;
        let chat = &mut schemas["ChatRequest"]["properties"];
        set_range(&mut chat["max_tokens"], ChatRequest::max_tokens(limits));
        set_decimal(&mut chat["temperature"], TEMPERATURE);
        set_max_length(&mut chat["message"], length);
        set_max_length(&mut chat["system_prompt"], length);
        assert!(chat["history"]["type"].to_string().contains("array"));
        chat["history"]["maxItems"] = ChatRequest::history(limits).max.into();
        set_max_length(
            &mut schemas["HistoryEntry"]["properties"]["content"],
            length,
        );

        let (name, dimension, can_shorten) = self.embedder;
        let embeddings = &mut schemas["EmbeddingsRequest"]["properties"];
        embeddings["model"]["enum"] = serde_json::json!([name]);
        set_range(
            &mut embeddings["dimensions"],
            openai::dimensions(dimension, can_shorten),
        );
        embeddings["encoding_format"]["enum"] =
            serde_json::json!([openai::FLOAT, openai::BASE64, null]);
        schemas["EmbeddingsInput"] = openai::input_schema();

        let names: Vec<&str> = self
            .models
            .names()
            .iter()
            .map(|(n, _)| n.as_str())
            .collect();
        routes::completions::state(schemas, &names, limits);
        links(&mut doc);
        serde_json::to_string(&doc)
    }
}

/// Links from what a write returns to the reads and deletes of what it wrote, for clients
/// and for stateful testing (`scripts/fuzz` follows them): an ingested entity to its lookup
/// and its delete, an ingested relationship to its source's lookup, a created workspace (by
/// its `name`, not its `id`) to its view, its keys and its delete.
fn links(doc: &mut serde_json::Value) {
    use serde_json::json;
    let link = |operation: &str, parameter: &str, value: &str, description: &str| {
        json!({
            "operationId": operation,
            "parameters": {parameter: value},
            "description": description,
        })
    };
    let entities = json!({
        "EntityByName": link("graph_entity", "entity_name", "$request.body#/0/name", "The first entity written, by its name"),
        "DeleteEntity": link("ingest_delete_entity", "name", "$request.body#/0/name", "Deletes the first entity written"),
    });
    let relationships = json!({
        "SourceByName": link("graph_entity", "entity_name", "$request.body#/0/source_name", "The first relationship's source"),
    });
    let workspace = "$response.body#/name";
    let workspaces = json!({
        "ShowWorkspace": link("admin_show", "workspace", workspace, "The workspace created"),
        "WorkspaceKeys": link("admin_keys", "workspace", workspace, "Its keys"),
        "MintKey": link("admin_mint", "workspace", workspace, "Mints a key for it"),
        "DeleteWorkspace": link("admin_delete", "workspace", workspace, "Deletes it"),
    });
    for (path, status, links) in [
        ("/data/v1/ingest/entities", "200", entities),
        ("/data/v1/ingest/relationships", "200", relationships),
        ("/admin/v1/workspaces", "201", workspaces),
    ] {
        let ok = &mut doc["paths"][path]["post"]["responses"][status];
        assert!(ok.is_object(), "POST {path} documents no {status}");
        ok["links"] = links;
    }
    // Every link names an operation of the document.
    let ids: Vec<String> = doc["paths"]
        .as_object()
        .into_iter()
        .flat_map(|paths| paths.values())
        .filter_map(|item| item.as_object())
        .flat_map(|item| item.values())
        .filter_map(|op| op["operationId"].as_str().map(str::to_owned))
        .collect();
    for id in [
        "graph_entity",
        "ingest_delete_entity",
        "admin_show",
        "admin_keys",
        "admin_mint",
        "admin_delete",
    ] {
        assert!(ids.iter().any(|i| i == id), "no operation {id} for a link");
    }
}

/// States `range` on an integer property of the JSON document.
fn set_range(property: &mut serde_json::Value, range: Range) {
    assert!(
        property["type"].to_string().contains("integer"),
        "{} is not an integer: {property}",
        range.field
    );
    property["minimum"] = range.min.into();
    property["maximum"] = range.max.into();
    property["default"] = range.default.into();
}

/// States `max` as the `maxLength` of a string property of the JSON document (a property
/// that is not there, or not a string, is a mistake in the type: it panics, as
/// [`set_range`] does).
fn set_max_length(property: &mut serde_json::Value, max: usize) {
    assert!(
        property["type"].to_string().contains("string"),
        "not a string: {property}"
    );
    property["maxLength"] = max.into();
}

/// States (least, most, default) on a number property of the JSON document.
fn set_decimal(property: &mut serde_json::Value, (least, most, default): (f64, f64, f64)) {
    assert!(
        property["type"].to_string().contains("number"),
        "not a number: {property}"
    );
    property["minimum"] = least.into();
    property["maximum"] = most.into();
    property["default"] = default.into();
}

/// States on the request types' schemas the rules their handlers check with, from the same
/// values ([`crate::extract::Rules`]).
struct Rules;

impl Modify for Rules {
    fn modify(&self, doc: &mut Document) {
        use routes::{agent, graph, ingest, rag};
        state::<graph::TraversalRequest>(doc);
        state::<graph::SearchRequest>(doc);
        state::<graph::DocumentsRequest>(doc);
        state::<graph::MergesRequest>(doc);
        state::<rag::RagRequest>(doc);
        state::<rag::HybridRequest>(doc);
        state::<rag::Filters>(doc);
        state::<agent::ChatRequest>(doc);
        state::<kbq_store::NewEntity>(doc);
        state::<kbq_store::NewRelationship>(doc);
        state::<kbq_store::NewDocument>(doc);
        state::<routes::sources::SourceRequest>(doc);
        state::<routes::sources::SourceUpload>(doc);
        file_types(doc);
        state::<routes::admin::NewKey>(doc);
        // A key's scopes: each once, so at most the four there are.
        let scopes = array(component(doc, "NewKey"), "NewKey", "scopes");
        scopes.unique_items = true;
        scopes.max_items = Some(4);
        for path in [
            "/data/v1/ingest/entities",
            "/data/v1/ingest/relationships",
            "/data/v1/ingest/documents",
        ] {
            let Schema::Array(body) = request_schema(doc, path, "application/json") else {
                panic!("{path} does not take an array");
            };
            items(body, ingest::BATCH);
        }
        import_records(doc);
        // Path parameters: names by the name rule, document ids by their shape; workspaces
        // by theirs, and keys by their ids'.
        let name = kbq_store::model::NAME_PATTERN;
        path_parameter(doc, "entity_name", name);
        path_parameter(doc, "name", name);
        path_parameter(doc, "id", kbq_store::write::DOCUMENT_ID_PATTERN);
        path_parameter(doc, "source", name);
        path_parameter(doc, "source_id", name);
        path_parameter(doc, "workspace", crate::workspaces::NAME_PATTERN);
        path_parameter(doc, "key_id", routes::admin::KEY_ID_PATTERN);
        parameter_pattern(
            doc,
            "workspace",
            utoipa::openapi::path::ParameterIn::Query,
            crate::workspaces::NAME_PATTERN,
        );
    }
}

/// States the content types a source's `file` part may have, as its multipart encoding:
/// one of these, or a generic type and a file name of an accepted extension (the operation's
/// description says so); any other is refused with 415.
fn file_types(doc: &mut Document) {
    let content = request_content(doc, "/data/v1/ingest/sources", "multipart/form-data");
    let mut file = utoipa::openapi::encoding::Encoding::default();
    file.content_type = Some(kbq_ingest::format::ACCEPTED_CONTENT_TYPES.join(", "));
    content.encoding.insert("file".to_string(), file);
}

/// The content of `path`'s POST body of type `content_type`.
fn request_content<'a>(doc: &'a mut Document, path: &str, content_type: &str) -> &'a mut Content {
    let content = doc
        .paths
        .paths
        .get_mut(path)
        .and_then(|item| item.post.as_mut())
        .and_then(|op| match op.request_body.as_mut() {
            Some(RefOr::T(body)) => body.content.get_mut(content_type),
            _ => None,
        });
    match content {
        Some(RefOr::T(content)) => content,
        _ => panic!("POST {path} takes no {content_type} body of its own"),
    }
}

/// The schema of `path`'s POST body of type `content_type`.
fn request_schema<'a>(doc: &'a mut Document, path: &str, content_type: &str) -> &'a mut Schema {
    match request_content(doc, path, content_type).schema.as_mut() {
        Some(RefOr::T(schema)) => schema,
        _ => panic!("POST {path} takes no {content_type} schema of its own"),
    }
}

/// The NDJSON import's records: each record type's schema with the `kind` that selects it,
/// as the `ImportRecord` component, and the route's body as one or more of them (a client
/// sends each as a line).
fn import_records(doc: &mut Document) {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, OneOfBuilder};
    let mut one_of = OneOfBuilder::new().description(Some(
        "A line of the import format (docs/import-format.md): a record, with `kind` naming its type",
    ));
    for (kind, name) in routes::ingest::KINDS {
        let mut record = component(doc, name).clone();
        let tag = ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some([kind]))
            .build();
        record.properties.insert("kind".into(), tag.into());
        record.properties.move_index(record.properties.len() - 1, 0);
        record.required.insert(0, "kind".into());
        record.description = None;
        one_of = one_of.item(record);
    }
    doc.components
        .as_mut()
        .expect("the document has components")
        .schemas
        .insert(
            "ImportRecord".into(),
            RefOr::T(Schema::OneOf(one_of.build())),
        );
    let lines = ArrayBuilder::new()
        .items(Ref::from_schema_name("ImportRecord"))
        .min_items(Some(1))
        .description(Some("One record per line"))
        .build();
    *request_schema(doc, "/data/v1/ingest/ndjson", "application/x-ndjson") = lines.into();
}

/// Writes `pattern` into the schema of every path parameter called `parameter`.
fn path_parameter(doc: &mut Document, parameter: &str, pattern: &str) {
    parameter_pattern(
        doc,
        parameter,
        utoipa::openapi::path::ParameterIn::Path,
        pattern,
    );
}

/// Writes `pattern` into the schema of every parameter `parameter` found `at` (the path, the
/// query); there must be one.
fn parameter_pattern(
    doc: &mut Document,
    parameter: &str,
    at: utoipa::openapi::path::ParameterIn,
    pattern: &str,
) {
    let mut found = false;
    for item in doc.paths.paths.values_mut() {
        for (_, op) in operations(item) {
            for p in op.parameters.iter_mut().flatten() {
                let RefOr::T(p) = p else { continue };
                if p.name == parameter && p.parameter_in == at {
                    let Some(RefOr::T(Schema::Object(schema))) = p.schema.as_mut() else {
                        panic!("parameter {parameter} has no string schema");
                    };
                    schema.pattern = Some(pattern.to_string());
                    found = true;
                }
            }
        }
    }
    assert!(found, "no parameter is called {parameter}");
}

/// Writes `T`'s rules into its schema's properties: a range as `minimum`, `maximum` and
/// `default`; a name as the name rule's `pattern` and `maxLength` (on the items of an array
/// of names); text that must not be blank as a pattern too; text's most characters as
/// `maxLength`; an array's size as `minItems` and `maxItems`. A rule naming a property the
/// schema lacks, or of another type, is a mistake in the type: it panics, and so fails every
/// test that builds the document.
fn state<T: RequestRules>(doc: &mut Document) {
    let name = T::name();
    let object = component(doc, &name);
    for range in T::RANGES {
        integer(object, &name, *range);
    }
    for field in T::NAMES {
        let p = text(object, &name, field);
        p.pattern = Some(kbq_store::model::NAME_PATTERN.to_string());
        p.max_length = Some(kbq_store::model::MAX_NAME_CHARS);
    }
    for field in T::NOT_BLANK {
        text(object, &name, field).pattern = Some(kbq_store::model::NOT_BLANK_PATTERN.to_string());
    }
    for (field, max) in T::LENGTHS {
        text(object, &name, field).max_length = Some(*max);
    }
    for list in T::LISTS {
        items(array(object, &name, list.field), *list);
    }
}

/// The object schema `name` of the document's components, to write rules into.
fn component<'a>(doc: &'a mut Document, name: &str) -> &'a mut Object {
    let schema = doc
        .components
        .as_mut()
        .and_then(|c| c.schemas.get_mut(name));
    let Some(RefOr::T(Schema::Object(object))) = schema else {
        panic!("{name} is not an object schema in the document");
    };
    object
}

/// The schema of `object`'s property `field` (of the schema `name`), to write a rule into.
fn property<'a>(object: &'a mut Object, name: &str, field: &str) -> &'a mut Schema {
    match object.properties.get_mut(field) {
        Some(RefOr::T(schema)) => schema,
        _ => panic!("{name} has no property `{field}` with a schema of its own"),
    }
}

/// The string schema of `field`, or of its items when it is an array of strings.
fn text<'a>(object: &'a mut Object, name: &str, field: &str) -> &'a mut Object {
    match property(object, name, field) {
        Schema::Object(p) => p,
        Schema::Array(a) => match &mut a.items {
            ArrayItems::RefOrSchema(items) => match &mut **items {
                RefOr::T(Schema::Object(p)) => p,
                _ => panic!("{name}.{field}'s items are not strings"),
            },
            _ => panic!("{name}.{field} has no items schema"),
        },
        _ => panic!("{name}.{field} is not a string or an array"),
    }
}

/// The array schema of `field`.
fn array<'a>(object: &'a mut Object, name: &str, field: &str) -> &'a mut Array {
    let Schema::Array(a) = property(object, name, field) else {
        panic!("{name}.{field} is not an array");
    };
    a
}

/// States an integer range on `object`'s property.
fn integer(object: &mut Object, name: &str, range: Range) {
    let Schema::Object(p) = property(object, name, range.field) else {
        panic!("{name}.{} is not an integer", range.field);
    };
    p.minimum = Some(Number::Int(range.min as isize));
    p.maximum = Some(Number::Int(range.max as isize));
    p.default = Some(range.default.into());
}

/// States an array's size.
fn items(a: &mut Array, list: Items) {
    a.min_items = Some(list.min);
    a.max_items = Some(list.max);
}

/// Adds what no handler's attribute says: the two key schemes, one named response per error
/// code, and on each operation the errors of the layers in front of its handler.
struct Layers;

impl Modify for Layers {
    fn modify(&self, doc: &mut Document) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            BEARER,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("`Authorization: Bearer KEY`"))
                    .build(),
            ),
        );
        components.add_security_scheme(
            API_KEY,
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "X-API-Key",
                "`X-API-Key: KEY`; read only when no `Authorization` header is sent",
            ))),
        );
        for code in ErrorCode::ALL {
            components
                .responses
                .insert(code.as_str().into(), RefOr::T(error_response(code)));
        }
        for (path, item) in doc.paths.paths.iter_mut() {
            for (method, op) in operations(item) {
                add_layer_errors(path, op);
                if method == "post" && QUOTA_CHECKED.contains(&path.as_str()) {
                    add_error(op, ErrorCode::QuotaExceeded);
                }
                name_operation(method, op);
            }
        }
    }
}

/// The writes checked against their workspace's quota (`crate::workspaces::Quota`).
const QUOTA_CHECKED: [&str; 4] = [
    "/data/v1/ingest/entities",
    "/data/v1/ingest/documents",
    "/data/v1/ingest/ndjson",
    "/data/v1/ingest/sources",
];

/// Operation ids are the handlers' names, which repeat across modules (`graph::documents`,
/// `ingest::documents`): the tag goes in front. A HEAD operation shares its GET's handler, so
/// `_head` goes behind.
fn name_operation(method: &str, op: &mut Operation) {
    let tag = op.tags.as_ref().and_then(|t| t.first()).cloned();
    op.operation_id = op.operation_id.take().map(|id| {
        let id = match tag {
            Some(tag) => format!("{tag}_{id}"),
            None => id,
        };
        if method == "head" {
            format!("{id}_head")
        } else {
            id
        }
    });
}

/// A response with the error body, described by the code's line of the table.
fn error_response(code: ErrorCode) -> Response {
    let mut res = ResponseBuilder::new()
        .description(code.answers(code.meaning()))
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorBody")))
                .build(),
        );
    match code {
        ErrorCode::InvalidApiKey => {
            res = res.header(
                "WWW-Authenticate",
                HeaderBuilder::new()
                    .schema(Some(Object::with_type(Type::String)))
                    .description(Some("`Bearer`"))
                    .build(),
            );
        }
        ErrorCode::RateLimitExceeded | ErrorCode::ServiceUnavailable => {
            res = res.header(
                "Retry-After",
                HeaderBuilder::new()
                    .schema(Some(Object::with_type(Type::Integer)))
                    .description(Some("Seconds to wait before retrying"))
                    .build(),
            );
        }
        ErrorCode::InvalidRequest
        | ErrorCode::RequestTimeout
        | ErrorCode::NotFound
        | ErrorCode::MethodNotAllowed
        | ErrorCode::VersionSunset
        | ErrorCode::InsufficientScope
        | ErrorCode::PayloadTooLarge
        | ErrorCode::UnsupportedMediaType
        | ErrorCode::Internal
        | ErrorCode::Upstream
        | ErrorCode::WorkspaceNotFound
        | ErrorCode::WorkspaceForbidden
        | ErrorCode::Conflict
        | ErrorCode::QuotaExceeded => {}
    }
    res.build()
}

/// Each operation of a path with its method's name.
fn operations(item: &mut PathItem) -> impl Iterator<Item = (&'static str, &mut Operation)> {
    [
        ("get", &mut item.get),
        ("put", &mut item.put),
        ("post", &mut item.post),
        ("delete", &mut item.delete),
        ("options", &mut item.options),
        ("head", &mut item.head),
        ("patch", &mut item.patch),
        ("trace", &mut item.trace),
    ]
    .into_iter()
    .filter_map(|(method, op)| op.as_mut().map(|op| (method, op)))
}

/// The errors that the layers in front of a handler answer with, by the rules that mount them
/// (src/routes/mod.rs, src/server.rs): a route that needs a key can answer 401 and 429, and 500
/// like any handler; one that needs a scope 403; a versioned path 410 after its sunset; one
/// that takes a body 413, 408 when the body is too slow to arrive, and 400 when it breaks its
/// schema.
fn add_layer_errors(path: &str, op: &mut Operation) {
    let requirements = serde_json::to_value(&op.security).unwrap_or_default();
    let requirements = requirements
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let keyed = !requirements.is_empty();
    let scoped = requirements.iter().any(|r| {
        r.as_object().is_some_and(|schemes| {
            schemes
                .values()
                .any(|s| s.as_array().is_some_and(|s| !s.is_empty()))
        })
    });
    let mut codes = Vec::new();
    if op.request_body.is_some() {
        codes.extend([
            ErrorCode::InvalidRequest,
            ErrorCode::RequestTimeout,
            ErrorCode::PayloadTooLarge,
        ]);
    }
    if keyed {
        codes.push(ErrorCode::InvalidApiKey);
    }
    if scoped {
        codes.push(ErrorCode::InsufficientScope);
    }
    if crate::versions::version_of(path).is_some() {
        codes.push(ErrorCode::VersionSunset);
    }
    // Every path parameter is checked: a value that breaks its rule is a 400 naming it.
    if path.contains('{') {
        codes.push(ErrorCode::InvalidRequest);
    }
    if keyed {
        codes.extend([ErrorCode::RateLimitExceeded, ErrorCode::Internal]);
    }
    // The key's workspace, or the one an operator's key names (crate::workspaces); the admin
    // API names its workspace in its paths instead.
    if keyed && !path.starts_with("/admin/") {
        codes.extend([
            ErrorCode::InvalidRequest,
            ErrorCode::WorkspaceForbidden,
            ErrorCode::WorkspaceNotFound,
            ErrorCode::ServiceUnavailable,
        ]);
        workspace_header(op);
    }
    for code in codes {
        add_error(op, code);
    }
}

/// Adds `code` to the operation's responses. A status that already answers with another code
/// (404 for an entity and for a workspace, 403 for a scope and for a workspace) says both.
fn add_error(op: &mut Operation, code: ErrorCode) {
    use std::collections::btree_map::Entry;
    let answers = |c: ErrorCode| c.answers(c.meaning());
    match op
        .responses
        .responses
        .entry(code.status().as_u16().to_string())
    {
        Entry::Vacant(v) => {
            v.insert(RefOr::Ref(Ref::from_response_name(code.as_str())));
        }
        Entry::Occupied(mut o) => {
            let mut response = match o.get() {
                RefOr::Ref(r) => {
                    let name = r.ref_location.rsplit('/').next().unwrap_or_default();
                    if name == code.as_str() {
                        return;
                    }
                    let Some(other) = ErrorCode::ALL.into_iter().find(|c| c.as_str() == name)
                    else {
                        return;
                    };
                    error_response(other)
                }
                RefOr::T(response) => response.clone(),
            };
            let tag = format!("`{}`", code.as_str());
            if !response.description.contains(&tag) {
                response.description = format!("{}; or {}", response.description, answers(code));
            }
            o.insert(RefOr::T(response));
        }
    }
}

/// The optional `X-KBQ-Workspace` header of a keyed operation.
fn workspace_header(op: &mut Operation) {
    let parameter = ParameterBuilder::new()
        .name("X-KBQ-Workspace")
        .parameter_in(ParameterIn::Header)
        .required(Required::False)
        .description(Some(format!(
            "The workspace to act in, for an `admin` key of `default` only; any other key may \
             name only its own. Without it, the key's own workspace. {}.",
            crate::workspaces::NAME_RULE
        )))
        .schema(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(crate::workspaces::NAME_PATTERN))
                .max_length(Some(crate::workspaces::MAX_NAME_CHARS)),
        ))
        .build();
    op.parameters
        .get_or_insert_with(Vec::new)
        .push(RefOr::T(parameter));
}
