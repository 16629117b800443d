//! Header forwarding (`--http-header-forward-pattern`,
//! `--grpc-header-forward-pattern`): request headers (gRPC metadata) whose
//! names match a regex, in any case as Triton matches them, reach the model
//! as string request parameters (a Python model's `request.parameters()`).
//! A parameter the request sets itself wins over a header of the same name;
//! Triton's reserved parameter names are never taken from headers.

use regex::Regex;

/// A compiled forward pattern.
#[derive(Debug, Clone)]
pub struct HeaderForward {
    pattern: Regex,
}

impl HeaderForward {
    /// Compiles `pattern` case-insensitively (Triton prefixes `(?i)`).
    /// `flag` names the flag in the error.
    pub fn new(pattern: &str, flag: &str) -> Result<HeaderForward, String> {
        Regex::new(&format!("(?i){pattern}"))
            .map(|pattern| HeaderForward { pattern })
            .map_err(|e| format!("{flag}={pattern}: not a regular expression: {e}"))
    }

    /// Whether a header of this name is forwarded.
    pub fn matches(&self, name: &str) -> bool {
        self.pattern.is_match(name) && !crate::core::types::reserved_parameter(name)
    }

    /// The (name, value) pairs to forward: names that match, with values
    /// that are text; never a reserved parameter name.
    pub fn pick<'a>(
        &self,
        headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    ) -> Vec<(String, String)> {
        headers
            .into_iter()
            .filter(|(name, _)| self.pattern.is_match(name))
            .filter(|(name, _)| !crate::core::types::reserved_parameter(name))
            .filter_map(|(name, value)| {
                Some((
                    name.to_string(),
                    std::str::from_utf8(value).ok()?.to_string(),
                ))
            })
            .collect()
    }

    /// Adds the matching headers to a request's parameters, leaving those
    /// the request sets alone.
    pub fn apply<'a>(
        &self,
        headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
        parameters: &mut serde_json::Map<String, serde_json::Value>,
    ) {
        for (name, value) in self.pick(headers) {
            parameters
                .entry(name)
                .or_insert(serde_json::Value::String(value));
        }
    }
}

/// gRPC metadata the transport itself sets (HTTP/2's and gRPC's own
/// headers), never forwarded; nor is binary (`-bin`) metadata.
fn transport_metadata(name: &str) -> bool {
    name.starts_with(':')
        || name.starts_with("grpc-")
        || name.ends_with("-bin")
        || matches!(name, "content-type" | "te" | "user-agent")
}

impl HeaderForward {
    /// Adds the matching metadata of a gRPC call to a request's
    /// parameters (as string parameters), leaving those it sets alone.
    pub fn apply_grpc(
        &self,
        metadata: &tonic::metadata::MetadataMap,
        parameters: &mut std::collections::HashMap<
            String,
            crate::server::protocol::pb::inference::InferParameter,
        >,
    ) {
        use crate::server::protocol::pb::inference::infer_parameter::ParameterChoice;
        // Text metadata only (binary `-bin` entries are never forwarded),
        // read in place: no copy of the call's metadata per request.
        let picked = self.pick(metadata.iter().filter_map(|entry| match entry {
            tonic::metadata::KeyAndValueRef::Ascii(key, value)
                if !transport_metadata(key.as_str()) =>
            {
                Some((key.as_str(), value.as_encoded_bytes()))
            }
            _ => None,
        }));
        for (name, value) in picked {
            parameters.entry(name).or_insert(
                crate::server::protocol::pb::inference::InferParameter {
                    parameter_choice: Some(ParameterChoice::StringParam(value)),
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_in_any_case_and_the_request_wins() {
        let f = HeaderForward::new("^x-trace-.*", "--x").unwrap();
        let headers: Vec<(&str, &[u8])> = vec![
            ("X-Trace-Id", b"abc"),
            ("x-trace-user", b"u"),
            ("x-other", b"no"),
            ("x-trace-bin", b"\xff\xfe"),
        ];
        let mut params = serde_json::Map::new();
        params.insert("x-trace-user".into(), serde_json::json!("from the request"));
        f.apply(headers, &mut params);
        assert_eq!(params["X-Trace-Id"], "abc");
        assert_eq!(params["x-trace-user"], "from the request");
        assert!(!params.contains_key("x-other"));
        assert!(!params.contains_key("x-trace-bin"));
        assert!(HeaderForward::new("(", "--flag")
            .unwrap_err()
            .starts_with("--flag=("));
    }

    #[test]
    fn reserved_names_are_never_forwarded() {
        let f = HeaderForward::new(".*", "--x").unwrap();
        let picked = f.pick(vec![
            ("priority", &b"9"[..]),
            ("timeout", b"1"),
            ("x", b"y"),
        ]);
        assert_eq!(picked, vec![("x".to_string(), "y".to_string())]);
    }
}
