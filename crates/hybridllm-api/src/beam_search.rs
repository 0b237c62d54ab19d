//! vLLM's `use_beam_search` extension of /v1/completions and /v1/chat/completions: `n` is
//! the beam width, the engine returns the `n` best beams in score order, each detokenized
//! here like any other choice. Bad combinations are a 400 naming the field.
use crate::errors::ApiError;
use crate::sampling::BeamSearchParams;
use crate::validation::SamplingRequest;

/// The beam-search parameters of a request, or None when it does not ask for beam search.
/// `logprobs` is the endpoint's parsed top-k (chat: top_logprobs when logprobs is true).
/// `max_tokens` is filled in once the prompt length is known. `max_num_seqs` is the
/// engine's (ModelInfo; 0 from a worker that does not say).
pub fn beam_params(
    req: &SamplingRequest,
    stream: bool,
    logprobs: Option<i64>,
    max_beam_width: u32,
    max_num_seqs: u32,
) -> Result<Option<BeamSearchParams>, ApiError> {
    if !req.use_beam_search.unwrap_or(false) {
        return Ok(None);
    }
    if stream {
        return Err(ApiError::bad_param(
            "stream",
            "use_beam_search does not support streaming: set stream to false.",
        ));
    }
    let n = req.n.unwrap_or(1);
    if n > max_beam_width as i64 {
        return Err(ApiError::bad_param(
            "n",
            format!(
                "n (the beam width) must be at most {max_beam_width} (the server's \
                 --max-beam-width), got {n}."
            ),
        ));
    }
    // The engine would refuse it: a beam group runs n sequences at once.
    if max_num_seqs > 0 && n > max_num_seqs as i64 {
        return Err(ApiError::bad_param(
            "n",
            format!(
                "n (the beam width) must be at most {max_num_seqs} (the engine's \
                 --max-num-seqs: a beam search runs n sequences at once), got {n}."
            ),
        ));
    }
    if let Some(t) = req.temperature.filter(|&t| t > 0.0) {
        return Err(ApiError::bad_param(
            "temperature",
            format!("temperature must be 0 with use_beam_search, got {t}."),
        ));
    }
    if logprobs.is_some() {
        return Err(ApiError::bad_param(
            "logprobs",
            "logprobs are not supported with use_beam_search.",
        ));
    }
    // Token masks the beam search's own step (top logprobs of the raw logits) never applies.
    for (field, set) in [
        ("allowed_token_ids", req.allowed_token_ids.is_some()),
        (
            "bad_words",
            req.bad_words.as_ref().is_some_and(|w| !w.is_empty()),
        ),
    ] {
        if set {
            return Err(ApiError::bad_param(
                field,
                format!("{field} is not supported with use_beam_search."),
            ));
        }
    }
    let length_penalty = req.length_penalty.unwrap_or(1.0);
    if !length_penalty.is_finite() {
        return Err(ApiError::bad_param(
            "length_penalty",
            format!("length_penalty must be a finite number, got {length_penalty}."),
        ));
    }
    Ok(Some(BeamSearchParams {
        beam_width: n as u32,
        max_tokens: 0,
        ignore_eos: req.ignore_eos.unwrap_or(false),
        length_penalty: length_penalty as f32,
        include_stop_str_in_output: req.include_stop_str_in_output.unwrap_or(false),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(json: serde_json::Value) -> SamplingRequest {
        serde_json::from_value(json).unwrap()
    }

    fn refused_param(json: serde_json::Value, stream: bool, logprobs: Option<i64>) -> String {
        match beam_params(&req(json), stream, logprobs, 16, 8) {
            Err(ApiError::BadRequest { param, .. }) => param.unwrap(),
            other => panic!("expected a 400, got {other:?}"),
        }
    }

    #[test]
    fn beam_search_only_when_asked() {
        assert!(
            beam_params(&req(serde_json::json!({"n": 4})), true, Some(3), 16, 8)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn n_is_the_beam_width() {
        let j = serde_json::json!({"use_beam_search": true, "n": 4, "ignore_eos": true,
                                   "length_penalty": 0.5, "include_stop_str_in_output": true});
        let b = beam_params(&req(j), false, None, 16, 8).unwrap().unwrap();
        assert_eq!(
            (
                b.beam_width,
                b.ignore_eos,
                b.length_penalty,
                b.include_stop_str_in_output
            ),
            (4, true, 0.5, true)
        );
        let d = beam_params(
            &req(serde_json::json!({"use_beam_search": true})),
            false,
            None,
            16,
            8,
        );
        assert_eq!(d.unwrap().unwrap().length_penalty, 1.0);
        // A worker that does not report max_num_seqs (0) leaves n to --max-beam-width.
        let wide = req(serde_json::json!({"use_beam_search": true, "n": 9}));
        let b = beam_params(&wide, false, None, 16, 0).unwrap().unwrap();
        assert_eq!(b.beam_width, 9);
    }

    #[test]
    fn refusals_name_the_field() {
        let on = |extra: serde_json::Value| {
            let mut j = serde_json::json!({"use_beam_search": true});
            j.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            j
        };
        assert_eq!(
            refused_param(on(serde_json::json!({})), true, None),
            "stream"
        );
        assert_eq!(
            refused_param(on(serde_json::json!({"n": 17})), false, None),
            "n"
        );
        assert_eq!(
            refused_param(on(serde_json::json!({"n": 9})), false, None),
            "n"
        );
        let hot = on(serde_json::json!({"temperature": 0.7}));
        assert_eq!(refused_param(hot, false, None), "temperature");
        assert_eq!(
            refused_param(on(serde_json::json!({})), false, Some(0)),
            "logprobs"
        );
        let masked = on(serde_json::json!({"allowed_token_ids": [1]}));
        assert_eq!(refused_param(masked, false, None), "allowed_token_ids");
        let banned = on(serde_json::json!({"bad_words": ["x"]}));
        assert_eq!(refused_param(banned, false, None), "bad_words");
        // An empty list asks for nothing.
        let none = on(serde_json::json!({"bad_words": []}));
        assert!(beam_params(&req(none), false, None, 16, 8)
            .unwrap()
            .is_some());
    }
}
