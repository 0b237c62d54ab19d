//! Native load generator behind `hybridllm bench ... --http-client native`.
//!
//! The Python benchmark prepares the requests (payloads, Poisson send times, concurrency cap)
//! and computes every statistic; this binary only sends them and times the streamed chunks, so
//! that on a small machine the client takes about half the CPU of the Python one and less
//! from the server it measures. It reads one JSON job file and writes one JSON document
//! to stdout: the run's duration, its own CPU time and one record per request, in input order;
//! `start` and `done` on stderr bracket the timed part.
//! The timing rules are the Python client's: TTFT is the first chunk carrying generated text,
//! ITL the gaps between such chunks, token counts from the final usage chunk. A JSON answer
//! (not streamed: /v1/embeddings) is one chunk: its TTFT is its latency, counts from `usage`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;

/// aiohttp's limits in the Python client: a hung server fails the request, not the run.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
const READ_TIMEOUT: Duration = Duration::from_secs(600);

#[derive(Deserialize)]
struct Job {
    /// Host and port, e.g. 127.0.0.1:8000.
    authority: String,
    path: String,
    api_key: Option<String>,
    /// In-flight cap; none sends each request at its time regardless of the others.
    concurrency: Option<usize>,
    /// Send offsets in seconds from the start, one per payload, non-decreasing.
    arrivals: Vec<f64>,
    /// Request bodies (JSON text).
    payloads: Vec<String>,
}

#[derive(Serialize, Default, Clone)]
struct Record {
    success: bool,
    error: String,
    prompt_tokens: u64,
    output_tokens: u64,
    ttft: f64,
    latency: f64,
    itl: Vec<f64>,
}

#[derive(Serialize)]
struct Report {
    duration_s: f64,
    cpu_s: f64,
    results: Vec<Record>,
}

/// The parts of a streamed chunk the benchmark reads; everything else is skipped unparsed.
#[derive(Deserialize)]
struct Event {
    choices: Option<Vec<Choice>>,
    usage: Option<Usage>,
    error: Option<serde::de::IgnoredAny>,
    /// The Responses API's named events: `response.output_text.delta` carries `delta`, the
    /// last (`response.completed` / `.incomplete`) the response with its usage.
    #[serde(rename = "type")]
    kind: Option<String>,
    delta: Option<String>,
    response: Option<ResponseObject>,
}

#[derive(Deserialize)]
struct ResponseObject {
    usage: Option<ResponseUsage>,
}

#[derive(Deserialize)]
struct ResponseUsage {
    input_tokens: u64,
    output_tokens: u64,
}

#[derive(Deserialize)]
struct Choice {
    delta: Option<Delta>,
    text: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    content: Option<String>,
    reasoning_content: Option<String>,
}

#[derive(Deserialize)]
struct Usage {
    prompt_tokens: u64,
    completion_tokens: u64,
}

impl Choice {
    fn has_text(&self) -> bool {
        let nonempty = |s: &Option<String>| s.as_deref().is_some_and(|t| !t.is_empty());
        match &self.delta {
            Some(d) => nonempty(&d.content) || nonempty(&d.reasoning_content),
            None => nonempty(&self.text),
        }
    }
}

/// What one streamed response says, fed body bytes as they arrive.
struct EventStream {
    start: Instant,
    last: Option<Instant>,
    chunks: u64,
    pending: Vec<u8>,
    data: Vec<u8>,
    /// The current event's `event:` name (the Responses API names its events).
    name: Vec<u8>,
    rec: Record,
}

/// Responses API events that carry neither text nor usage nor an error: not parsed, so the
/// client's CPU per request does not grow with the server's framing (the whole response
/// object rides on `response.created` and `.in_progress`).
const FRAMING_EVENTS: [&[u8]; 7] = [
    b"response.created",
    b"response.in_progress",
    b"response.output_item.added",
    b"response.content_part.added",
    b"response.output_text.done",
    b"response.content_part.done",
    b"response.output_item.done",
];

impl EventStream {
    fn new(start: Instant) -> Self {
        Self {
            start,
            last: None,
            chunks: 0,
            pending: Vec::new(),
            data: Vec::new(),
            name: Vec::new(),
            rec: Record::default(),
        }
    }

    /// SSE framing: `data:` lines accumulate until a blank line dispatches the event. Whole
    /// lines are read in place; only a line split across reads is kept for the next one.
    fn feed(&mut self, bytes: &[u8], now: Instant) {
        let mut rest = bytes;
        if !self.pending.is_empty() {
            let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
                self.pending.extend_from_slice(rest);
                return;
            };
            let mut line = std::mem::take(&mut self.pending);
            line.extend_from_slice(&rest[..nl]);
            rest = &rest[nl + 1..];
            self.line(&line, now);
            line.clear();
            self.pending = line;
        }
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            self.line(&rest[..nl], now);
            rest = &rest[nl + 1..];
        }
        self.pending.extend_from_slice(rest);
    }

    fn line(&mut self, line: &[u8], now: Instant) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            self.name.clear();
            if !self.data.is_empty() {
                let event = std::mem::take(&mut self.data);
                self.dispatch(&event, now);
                self.data = event;
                self.data.clear();
            }
        } else if let Some(value) = line.strip_prefix(b"event:") {
            self.name.clear();
            self.name
                .extend_from_slice(value.strip_prefix(b" ").unwrap_or(value));
        } else if let Some(value) = line.strip_prefix(b"data:") {
            // A framing event's data is not even kept (see FRAMING_EVENTS).
            if FRAMING_EVENTS.contains(&&self.name[..]) {
                return;
            }
            if !self.data.is_empty() {
                self.data.push(b'\n');
            }
            self.data
                .extend_from_slice(value.strip_prefix(b" ").unwrap_or(value));
        }
    }

    fn dispatch(&mut self, event: &[u8], now: Instant) {
        if event == b"[DONE]" || !self.rec.error.is_empty() {
            return;
        }
        let msg: Event = match serde_json::from_slice(event) {
            Ok(m) => m,
            Err(e) => return self.fail(format!("bad event: {e}")),
        };
        let kind = msg.kind.as_deref();
        if msg.error.is_some() && msg.choices.is_none() || kind == Some("error") {
            let text = String::from_utf8_lossy(event);
            return self.fail(format!("stream error: {}", truncate(&text, 200)));
        }
        let choice_text = msg
            .choices
            .as_ref()
            .and_then(|c| c.first())
            .is_some_and(Choice::has_text);
        let delta_text = kind == Some("response.output_text.delta")
            && msg.delta.as_deref().is_some_and(|d| !d.is_empty());
        if choice_text || delta_text {
            self.chunks += 1;
            match self.last {
                None => self.rec.ttft = (now - self.start).as_secs_f64(),
                Some(prev) => self.rec.itl.push((now - prev).as_secs_f64()),
            }
            self.last = Some(now);
        }
        if let Some(u) = msg.usage {
            self.rec.prompt_tokens = u.prompt_tokens;
            self.rec.output_tokens = u.completion_tokens;
        }
        if let Some(u) = msg.response.and_then(|r| r.usage) {
            self.rec.prompt_tokens = u.input_tokens;
            self.rec.output_tokens = u.output_tokens;
        }
    }

    fn fail(&mut self, error: String) {
        if self.rec.error.is_empty() {
            self.rec.error = error;
        }
    }

    fn finish(mut self, end: Instant) -> Record {
        if self.rec.error.is_empty() {
            self.rec.latency = (end - self.start).as_secs_f64();
            if self.rec.output_tokens == 0 {
                self.rec.output_tokens = self.chunks;
            }
            if self.last.is_none() {
                self.rec.error = "no generated text in the stream".into();
            } else {
                self.rec.success = true;
            }
        }
        self.rec
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

struct Client {
    authority: String,
    path: String,
    auth: Option<String>,
}

impl Client {
    async fn connect(&self) -> anyhow::Result<SendRequest<Full<Bytes>>> {
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&self.authority))
            .await
            .map_err(|_| anyhow::anyhow!("connect timed out"))??;
        stream.set_nodelay(true)?;
        let (sender, conn) = http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    }

    /// One request on `conn` (reconnecting when it is closed); never panics on server faults.
    async fn send(&self, conn: &mut Option<SendRequest<Full<Bytes>>>, body: &str) -> Record {
        let start = Instant::now();
        match self.exchange(conn, body, start).await {
            Ok(rec) => rec,
            Err(e) => {
                *conn = None;
                Record {
                    error: format!("transport: {e}"),
                    ..Record::default()
                }
            }
        }
    }

    async fn exchange(
        &self,
        conn: &mut Option<SendRequest<Full<Bytes>>>,
        body: &str,
        start: Instant,
    ) -> anyhow::Result<Record> {
        let alive = match conn.as_mut() {
            Some(s) => s.ready().await.is_ok(),
            None => false,
        };
        if !alive {
            *conn = Some(self.connect().await?);
        }
        let ready = conn.as_mut().expect("connected above");
        let mut req = Request::post(&self.path)
            .header("host", &self.authority)
            .header("content-type", "application/json")
            .header("accept", "text/event-stream");
        if let Some(auth) = &self.auth {
            req = req.header("authorization", auth);
        }
        let resp = ready
            .send_request(req.body(Full::new(Bytes::from(body.to_owned())))?)
            .await?;
        let status = resp.status();
        let whole_json = status == StatusCode::OK
            && resp
                .headers()
                .get(hyper::header::CONTENT_TYPE)
                .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
        let mut body = resp.into_body();
        let mut answer = Vec::new();
        let mut stream = EventStream::new(start);
        let mut head = Vec::new();
        loop {
            let next = tokio::time::timeout(READ_TIMEOUT, body.frame())
                .await
                .map_err(|_| anyhow::anyhow!("no data for {} s", READ_TIMEOUT.as_secs()))?;
            let Some(frame) = next else { break };
            let frame = frame?;
            if let Some(data) = frame.data_ref() {
                let now = Instant::now();
                if status != StatusCode::OK {
                    head.extend_from_slice(&data[..data.len().min(200 - head.len().min(200))]);
                } else if whole_json {
                    answer.extend_from_slice(data);
                } else {
                    stream.feed(data, now);
                }
            }
        }
        if status != StatusCode::OK {
            let text = String::from_utf8_lossy(&head);
            return Ok(Record {
                error: format!("HTTP {}: {text}", status.as_u16()),
                ..Record::default()
            });
        }
        if whole_json {
            return Ok(json_record(&answer, (Instant::now() - start).as_secs_f64()));
        }
        Ok(stream.finish(Instant::now()))
    }
}

/// A whole JSON answer: one chunk, its token counts from `usage`.
fn json_record(body: &[u8], latency: f64) -> Record {
    #[derive(Deserialize, Default)]
    struct Counts {
        #[serde(default)]
        prompt_tokens: u64,
        #[serde(default)]
        completion_tokens: u64,
    }
    #[derive(Deserialize)]
    struct Answer {
        #[serde(default)]
        usage: Option<Counts>,
    }
    match serde_json::from_slice::<Answer>(body) {
        Ok(a) => {
            let usage = a.usage.unwrap_or_default();
            Record {
                success: true,
                prompt_tokens: usage.prompt_tokens,
                output_tokens: usage.completion_tokens,
                ttft: latency,
                latency,
                ..Record::default()
            }
        }
        Err(e) => Record {
            error: format!("bad JSON answer: {e}"),
            ..Record::default()
        },
    }
}

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

async fn run(job: Job) -> anyhow::Result<Report> {
    anyhow::ensure!(
        job.arrivals.len() == job.payloads.len(),
        "one arrival per payload"
    );
    let auth = job.api_key.as_ref().map(|k| format!("Bearer {k}"));
    let client = Arc::new(Client {
        authority: job.authority,
        path: job.path,
        auth,
    });
    let n = job.payloads.len();
    // Warm-up and sanity check, like the Python client's first request.
    if let Some(first) = job.payloads.first() {
        let rec = client.send(&mut None, first).await;
        anyhow::ensure!(rec.success, "test request failed: {}", rec.error);
    }
    let slots = job.concurrency.unwrap_or(n).clamp(1, n.max(1));
    let payloads = Arc::new(job.payloads);
    let arrivals = Arc::new(job.arrivals);
    let results = Arc::new(Mutex::new(vec![Record::default(); n]));
    let next = Arc::new(AtomicUsize::new(0));
    // The caller starts and stops its own CPU meters on these two lines.
    eprintln!("start");
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    let mut tasks = Vec::with_capacity(slots);
    for _ in 0..slots {
        let (client, payloads, arrivals, results, next) = (
            client.clone(),
            payloads.clone(),
            arrivals.clone(),
            results.clone(),
            next.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut conn = None;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= payloads.len() {
                    break;
                }
                tokio::time::sleep_until((t0 + Duration::from_secs_f64(arrivals[i])).into()).await;
                let rec = client.send(&mut conn, &payloads[i]).await;
                results.lock().unwrap()[i] = rec;
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let duration_s = t0.elapsed().as_secs_f64();
    let cpu_s = cpu_seconds() - cpu0;
    eprintln!("done");
    let results = std::mem::take(&mut *results.lock().unwrap());
    Ok(Report {
        duration_s,
        cpu_s,
        results,
    })
}

fn main() -> anyhow::Result<()> {
    let path = std::env::args()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("usage: hybridllm-loadgen JOB.json"))?;
    let job: Job = serde_json::from_slice(&std::fs::read(&path)?)?;
    // One thread: the point is to leave the cores to the server under test.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let report = rt.block_on(run(job))?;
    serde_json::to_writer(std::io::stdout().lock(), &report)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROLE: &str = r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#;
    const TOKEN: &str = r#"{"choices":[{"index":0,"delta":{"content":"hi"}}]}"#;
    const USAGE: &str = r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2}}"#;

    fn body(events: &[&str], eol: &str) -> Vec<u8> {
        let mut out = String::new();
        for e in events {
            out += &format!("data: {e}{eol}{eol}");
        }
        out.into_bytes()
    }

    /// Feeds `bytes` in pieces of `step` bytes, one millisecond apart.
    fn run(bytes: &[u8], step: usize) -> Record {
        let t0 = Instant::now();
        let mut s = EventStream::new(t0);
        for (i, piece) in bytes.chunks(step).enumerate() {
            s.feed(piece, t0 + Duration::from_millis(1 + i as u64));
        }
        s.finish(t0 + Duration::from_secs(1))
    }

    #[test]
    fn any_split_and_line_end_gives_the_same_record() {
        for eol in ["\n", "\r\n"] {
            let bytes = body(&[ROLE, TOKEN, TOKEN, USAGE, "[DONE]"], eol);
            for step in [1, 2, 3, 7, bytes.len()] {
                let rec = run(&bytes, step);
                assert!(rec.success, "{eol:?} {step}: {}", rec.error);
                assert_eq!((rec.prompt_tokens, rec.output_tokens), (7, 2));
                assert_eq!(rec.itl.len(), 1, "one gap between two text chunks");
                assert_eq!(rec.latency, 1.0);
            }
        }
    }

    #[test]
    fn role_only_chunk_is_not_the_first_token() {
        let bytes = body(&[ROLE, TOKEN], "\n");
        let split = body(&[ROLE], "\n").len();
        let t0 = Instant::now();
        let mut s = EventStream::new(t0);
        s.feed(&bytes[..split], t0 + Duration::from_millis(3));
        s.feed(&bytes[split..], t0 + Duration::from_millis(5));
        let rec = s.finish(t0 + Duration::from_millis(9));
        assert_eq!(rec.ttft, 0.005);
        assert_eq!(
            rec.output_tokens, 1,
            "no usage chunk: text chunks are counted"
        );
    }

    #[test]
    fn json_answer_is_one_chunk() {
        let rec = json_record(
            br#"{"data":[],"usage":{"prompt_tokens":7,"total_tokens":7}}"#,
            0.5,
        );
        assert!(rec.success);
        assert_eq!((rec.prompt_tokens, rec.output_tokens), (7, 0));
        assert_eq!((rec.ttft, rec.latency), (0.5, 0.5));
        let rec = json_record(b"{oops", 0.5);
        assert!(!rec.success && rec.error.starts_with("bad JSON answer"));
    }

    #[test]
    fn error_event_and_empty_stream_fail() {
        let rec = run(
            &body(&[r#"{"error":{"message":"boom","code":500}}"#], "\n"),
            4,
        );
        assert!(!rec.success);
        assert!(rec.error.starts_with("stream error: ") && rec.error.contains("boom"));
        let rec = run(&body(&[ROLE, "[DONE]"], "\n"), 5);
        assert_eq!(rec.error, "no generated text in the stream");
        let rec = run(b"data: {not json\n\n", 100);
        assert!(rec.error.starts_with("bad event: "), "{}", rec.error);
    }

    #[test]
    fn responses_events_count() {
        let events = [
            r#"{"type":"response.created","sequence_number":0,"response":{"usage":null}}"#,
            r#"{"type":"response.output_text.delta","sequence_number":1,"delta":""}"#,
            r#"{"type":"response.output_text.delta","sequence_number":2,"delta":"a"}"#,
            r#"{"type":"response.output_text.delta","sequence_number":3,"delta":"b"}"#,
            r#"{"type":"response.completed","sequence_number":4,"response":{"usage":{"input_tokens":7,"output_tokens":3}}}"#,
        ];
        let rec = run(&body(&events, "\n"), 9);
        assert!(rec.success, "{}", rec.error);
        assert_eq!(
            (rec.prompt_tokens, rec.output_tokens, rec.itl.len()),
            (7, 3, 1)
        );
        let failed = run(
            &body(&[events[0], r#"{"type":"error","message":"x"}"#], "\n"),
            9,
        );
        assert!(!failed.success && failed.error.starts_with("stream error"));
    }

    #[test]
    fn named_framing_events_are_not_parsed() {
        let stream = b"event: response.created\ndata: {not json at all\n\n\
            event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"a\"}\n\n\
            event: response.output_text.done\ndata: {\"text\": 12\n\n\
            event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n";
        let rec = run(stream, 3);
        assert!(rec.success, "{}", rec.error);
        assert_eq!((rec.prompt_tokens, rec.output_tokens), (5, 1));
        let bad = run(
            b"event: error\ndata: {\"type\":\"error\",\"message\":\"x\"}\n\n",
            3,
        );
        assert!(!bad.success && bad.error.starts_with("stream error"));
    }

    #[test]
    fn completions_text_counts() {
        let rec = run(&body(&[r#"{"choices":[{"index":0,"text":"a"}]}"#], "\n"), 8);
        assert!(rec.success);
        assert_eq!(rec.output_tokens, 1);
    }
}
