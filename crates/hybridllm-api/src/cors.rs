//! CORS from vLLM's `--allowed-origins/-methods/-headers` and `--allow-credentials` ("*" in a
//! list allows anything), decided once for both shells: the whole answer to a preflight, and
//! the headers of every other answer to a request that names its origin. A preflight the
//! policy refuses is a 400 naming what failed (`Disallowed CORS origin, method`), as vLLM
//! answers it, rather than a 200 that the browser then rejects.

/// Request headers a browser may send without asking (the CORS-safelisted ones).
const SAFELISTED: [&str; 4] = [
    "accept",
    "accept-language",
    "content-language",
    "content-type",
];
/// How long a browser may cache a preflight answer, in seconds.
const MAX_AGE: &str = "600";

enum Allowed {
    Any,
    /// Compared case-insensitively for methods and headers, exactly for origins.
    Only(Vec<String>),
}

impl Allowed {
    fn new(list: &[String]) -> Self {
        match list.iter().any(|s| s == "*") {
            true => Allowed::Any,
            false => Allowed::Only(list.to_vec()),
        }
    }
    fn allows(&self, value: &str, case_insensitive: bool) -> bool {
        match self {
            Allowed::Any => true,
            Allowed::Only(list) if case_insensitive => {
                list.iter().any(|v| v.eq_ignore_ascii_case(value))
            }
            Allowed::Only(list) => list.iter().any(|v| v == value),
        }
    }
}

/// A whole HTTP answer: status, headers, body.
pub type Answer = (u16, Vec<(&'static str, String)>, String);

pub struct Cors {
    origins: Allowed,
    methods: Allowed,
    headers: Allowed,
    /// Only with explicit lists: browsers ignore credentials with wildcards.
    credentials: bool,
}

impl Cors {
    pub fn new(
        origins: &[String],
        methods: &[String],
        headers: &[String],
        credentials: bool,
    ) -> Self {
        let (origins, methods, headers) = (
            Allowed::new(origins),
            Allowed::new(methods),
            Allowed::new(headers),
        );
        let explicit = |a: &Allowed| matches!(a, Allowed::Only(_));
        let credentials =
            credentials && explicit(&origins) && explicit(&methods) && explicit(&headers);
        Cors {
            origins,
            methods,
            headers,
            credentials,
        }
    }

    /// Whether a request is a preflight: OPTIONS naming its origin and the method it asks for.
    pub fn is_preflight(method: &str, origin: Option<&str>, request_method: Option<&str>) -> bool {
        method == "OPTIONS" && origin.is_some() && request_method.is_some()
    }

    fn allow_origin(&self, origin: &str) -> Option<(&'static str, String)> {
        if !self.origins.allows(origin, false) {
            return None;
        }
        let value = match (&self.origins, self.credentials) {
            (Allowed::Any, false) => "*".to_string(),
            _ => origin.to_string(),
        };
        Some(("access-control-allow-origin", value))
    }

    /// The answer to a preflight. `request_headers`: Access-Control-Request-Headers;
    /// `private_network`: whether it asks for private-network access (never granted).
    pub fn preflight(
        &self,
        origin: &str,
        request_method: &str,
        request_headers: Option<&str>,
        private_network: bool,
    ) -> Answer {
        let asked: Vec<String> = request_headers
            .unwrap_or("")
            .split(',')
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .collect();
        let mut failures = vec![];
        if !self.origins.allows(origin, false) {
            failures.push("origin");
        }
        if !self.methods.allows(request_method, true) {
            failures.push("method");
        }
        let header_ok =
            |h: &String| SAFELISTED.contains(&h.as_str()) || self.headers.allows(h, true);
        if !asked.iter().all(header_ok) {
            failures.push("headers");
        }
        if private_network {
            failures.push("private-network");
        }
        let vary = (
            "vary",
            "origin, access-control-request-method, access-control-request-headers".to_string(),
        );
        let mut headers = vec![vary];
        headers.extend(self.allow_origin(origin));
        if !failures.is_empty() {
            headers.push(("content-type", "text/plain; charset=utf-8".into()));
            return (
                400,
                headers,
                format!("Disallowed CORS {}", failures.join(", ")),
            );
        }
        let methods = match &self.methods {
            Allowed::Any => "*".to_string(),
            Allowed::Only(list) => list.join(", "),
        };
        headers.push(("access-control-allow-methods", methods));
        let allow_headers = match &self.headers {
            Allowed::Any => asked.join(", "),
            Allowed::Only(list) => list.join(", "),
        };
        if !allow_headers.is_empty() {
            headers.push(("access-control-allow-headers", allow_headers));
        }
        if self.credentials {
            headers.push(("access-control-allow-credentials", "true".into()));
        }
        headers.push(("access-control-max-age", MAX_AGE.into()));
        (200, headers, String::new())
    }

    /// The headers of any other answer to a request from `origin` (none for an origin the
    /// policy does not allow: the browser then keeps the answer from the page).
    pub fn response_headers(&self, origin: &str) -> Vec<(&'static str, String)> {
        let Some(allow) = self.allow_origin(origin) else {
            return vec![];
        };
        let echoed = allow.1 != "*";
        let mut headers = vec![allow];
        if self.credentials {
            headers.push(("access-control-allow-credentials", "true".into()));
        }
        if echoed {
            headers.push(("vary", "origin".into()));
        }
        headers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn header<'a>(a: &'a Answer, name: &str) -> Option<&'a str> {
        a.1.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn names_what_the_policy_refuses() {
        let c = Cors::new(
            &strings(&["https://a.example"]),
            &strings(&["GET", "POST"]),
            &strings(&["Authorization"]),
            true,
        );
        let ok = c.preflight(
            "https://a.example",
            "POST",
            Some("authorization, Content-Type"),
            false,
        );
        assert_eq!(ok.0, 200);
        assert_eq!(
            header(&ok, "access-control-allow-origin"),
            Some("https://a.example")
        );
        assert_eq!(
            header(&ok, "access-control-allow-methods"),
            Some("GET, POST")
        );
        assert_eq!(
            header(&ok, "access-control-allow-credentials"),
            Some("true")
        );
        let bad = c.preflight("https://b.example", "PUT", Some("x-secret"), false);
        assert_eq!(
            (bad.0, bad.2.as_str()),
            (400, "Disallowed CORS origin, method, headers")
        );
        assert_eq!(header(&bad, "access-control-allow-origin"), None);
        let bad = c.preflight("https://a.example", "POST", None, true);
        assert_eq!(bad.2, "Disallowed CORS private-network");
        assert_eq!(
            c.response_headers("https://a.example"),
            vec![
                (
                    "access-control-allow-origin",
                    "https://a.example".to_string()
                ),
                ("access-control-allow-credentials", "true".to_string()),
                ("vary", "origin".to_string()),
            ]
        );
        assert!(c.response_headers("https://b.example").is_empty());
    }

    #[test]
    fn wildcards_allow_anything_without_credentials() {
        let any = strings(&["*"]);
        let c = Cors::new(&any, &any, &any, true);
        let ok = c.preflight("https://b.example", "PUT", Some("X-Secret"), false);
        assert_eq!(ok.0, 200);
        assert_eq!(header(&ok, "access-control-allow-origin"), Some("*"));
        assert_eq!(
            header(&ok, "access-control-allow-headers"),
            Some("x-secret")
        );
        assert_eq!(header(&ok, "access-control-allow-credentials"), None);
        assert_eq!(
            c.response_headers("https://b.example"),
            vec![("access-control-allow-origin", "*".to_string())]
        );
        assert!(Cors::is_preflight("OPTIONS", Some("o"), Some("GET")));
        assert!(!Cors::is_preflight("OPTIONS", Some("o"), None));
    }
}
