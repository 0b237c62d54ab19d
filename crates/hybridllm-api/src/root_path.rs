//! `--root-path` (vLLM's, uvicorn's): the server sits behind a proxy under a path prefix. A
//! request is served whether the proxy strips the prefix or passes it on: the prefix, when
//! the path has it, is taken off before routing (as Starlette routes under a root path).

/// The flag's value as a prefix: leading `/`, no trailing `/`; None for none (`""`, `/`).
pub fn normalise(root: Option<&str>) -> Result<Option<String>, String> {
    let Some(root) = root.map(|r| r.trim_end_matches('/')) else {
        return Ok(None);
    };
    if root.is_empty() {
        return Ok(None);
    }
    if !root.starts_with('/') {
        return Err(format!("--root-path must start with '/', got {root:?}"));
    }
    Ok(Some(root.to_string()))
}

/// The path routes see: `path` without the `root` prefix when it has it (`/llm` is `/`).
pub fn route_path<'a>(root: &str, path: &'a str) -> Option<&'a str> {
    let rest = path.strip_prefix(root)?;
    match rest {
        "" => Some("/"),
        r if r.starts_with('/') => Some(r),
        _ => None, // `/llmx` is not under `/llm`
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        assert_eq!(normalise(Some("/llm/")).unwrap().as_deref(), Some("/llm"));
        assert_eq!(normalise(Some("/")).unwrap(), None);
        assert_eq!(normalise(None).unwrap(), None);
        assert!(normalise(Some("llm")).is_err());
        assert_eq!(route_path("/llm", "/llm/v1/models"), Some("/v1/models"));
        assert_eq!(route_path("/llm", "/llm"), Some("/"));
        assert_eq!(route_path("/llm", "/llmx/v1"), None);
        assert_eq!(route_path("/llm", "/v1/models"), None);
    }
}
