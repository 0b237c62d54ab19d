//! Request limits checked before any handler runs: header fields (431), the body's content
//! type (415) and size (413). The shells count and read; the rules and messages are here.
use crate::errors::ApiError;

pub const MAX_HEADER_FIELDS: usize = 100;
pub const MAX_HEADER_BYTES: usize = 32 << 10;

/// 431 when a request has more than MAX_HEADER_FIELDS header fields or more than
/// MAX_HEADER_BYTES of names and values together.
pub fn check_headers(fields: usize, bytes: usize) -> Result<(), ApiError> {
    if fields > MAX_HEADER_FIELDS || bytes > MAX_HEADER_BYTES {
        return Err(ApiError::HeadersTooLarge(format!(
            "Request header fields too large: {fields} fields, {bytes} bytes (the limit is \
             {MAX_HEADER_FIELDS} fields and {MAX_HEADER_BYTES} bytes)."
        )));
    }
    Ok(())
}

/// A JSON body must say so, or say nothing (415 otherwise): `application/json` or any
/// `application/*+json`, parameters such as charset allowed.
pub fn check_json_content_type(value: Option<&[u8]>) -> Result<(), ApiError> {
    let Some(value) = value else {
        return Ok(());
    };
    let text = String::from_utf8_lossy(value);
    let media = text
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let json = media == "application/json"
        || (media.starts_with("application/") && media.ends_with("+json"));
    if json {
        Ok(())
    } else {
        Err(ApiError::UnsupportedMediaType(format!(
            "Unsupported Media Type: the request body must be application/json, got '{text}'."
        )))
    }
}

/// 413 when the body (as declared, or as read so far) is over the limit.
pub fn check_body_size(bytes: usize, limit: usize) -> Result<(), ApiError> {
    if bytes > limit {
        return Err(ApiError::PayloadTooLarge(limit));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits() {
        assert!(check_headers(100, 32 << 10).is_ok());
        assert_eq!(check_headers(101, 0).unwrap_err().status().as_u16(), 431);
        assert!(check_json_content_type(None).is_ok());
        assert!(check_json_content_type(Some(b"application/json; charset=utf-8")).is_ok());
        assert!(check_json_content_type(Some(b"application/vnd.x+json")).is_ok());
        let e = check_json_content_type(Some(b"text/plain")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Unsupported Media Type: the request body must be application/json, got 'text/plain'."
        );
        assert_eq!(
            check_body_size(11, 10).unwrap_err().to_string(),
            "Request body is larger than the limit of 10 bytes."
        );
        assert!(check_body_size(10, 10).is_ok());
    }
}
