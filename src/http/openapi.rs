//! `GET /v1/openapi.json`: the OpenAPI 3.1 document of the HTTP routes.
//!
//! Hand-written (`src/http/openapi.json`), and checked against the code by
//! a test: its paths and methods are exactly [`ROUTES`](super::routes::ROUTES).

use axum::body::Body;
use http::StatusCode;

/// The document.
pub const DOCUMENT: &str = include_str!("openapi.json");

/// The document as a response.
pub fn response() -> http::Response<Body> {
    super::bytes_response(StatusCode::OK, DOCUMENT.as_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::super::routes::ROUTES;
    use super::*;

    #[test]
    fn document_lists_exactly_the_routes() {
        let doc: serde_json::Value = serde_json::from_str(DOCUMENT).expect("valid JSON");
        assert_eq!(doc["openapi"], "3.1.0");
        let mut documented: Vec<(String, String)> = doc["paths"]
            .as_object()
            .expect("paths")
            .iter()
            .flat_map(|(path, item)| {
                item.as_object()
                    .expect("path item")
                    .keys()
                    .map(move |m| (m.to_uppercase(), path.clone()))
            })
            .collect();
        let mut served: Vec<(String, String)> = ROUTES
            .iter()
            .map(|(m, p)| (m.as_str().to_owned(), (*p).to_owned()))
            .collect();
        documented.sort();
        served.sort();
        assert_eq!(documented, served);
        // Every $ref points at something defined.
        let text = DOCUMENT;
        for r in text.split("\"$ref\": \"#/components/").skip(1) {
            let target = r.split('"').next().expect("ref");
            let mut node = &doc["components"];
            for part in target.split('/') {
                node = &node[part];
            }
            assert!(!node.is_null(), "dangling $ref {target}");
        }
    }
}
