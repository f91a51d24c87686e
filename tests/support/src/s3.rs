//! A fake S3-compatible object store on 127.0.0.1:0, for the blob store's
//! S3 backend: one bucket, path-style URLs (`/<bucket>/<key>`), objects kept
//! in memory with a last-modified time a test can move into the past.
//!
//! It answers what an S3 client needs to keep files: `PUT`, `GET`, `HEAD`
//! and `DELETE` of an object (`If-None-Match: *` on `PUT` refuses an
//! existing key with 412), and `ListObjectsV2` (`GET /<bucket>?list-type=2`
//! with `prefix`, `start-after`, `continuation-token` and `max-keys`, paged
//! like S3). It does not check signatures, but it refuses (403) a request
//! without an `AWS4-HMAC-SHA256` `Authorization` header naming
//! [`ACCESS_KEY_ID`], and counts those refusals. Every request is recorded
//! as `METHOD /path?query`.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;

/// The access key id the fake accepts in `Authorization`.
pub const ACCESS_KEY_ID: &str = "FAKEACCESSKEY0000001";
/// A secret access key to configure the client with (not checked).
pub const SECRET_ACCESS_KEY: &str = "fake/secret+access-key-0123456789abcdef";

#[derive(Debug, Clone)]
struct Object {
    bytes: Bytes,
    modified: SystemTime,
    etag: String,
}

#[derive(Debug, Default)]
struct Bucket {
    name: String,
    objects: Mutex<BTreeMap<String, Object>>,
    requests: Mutex<Vec<String>>,
    unauthorized: Mutex<usize>,
    page_size: Mutex<usize>,
}

impl Bucket {
    fn objects(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Object>> {
        self.objects.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The fake server; cheap to clone.
#[derive(Clone)]
pub struct FakeS3 {
    endpoint: String,
    bucket: Arc<Bucket>,
}

impl FakeS3 {
    /// Starts a server holding the empty bucket `bucket`.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound.
    pub async fn start(bucket: &str) -> Self {
        let bucket = Arc::new(Bucket {
            name: bucket.to_owned(),
            page_size: Mutex::new(1000),
            ..Bucket::default()
        });
        let app = Router::new()
            .route("/{bucket}", any(list))
            .route("/{bucket}/", any(list))
            .route("/{bucket}/{*key}", any(object))
            .with_state(Arc::clone(&bucket));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            endpoint: format!("http://{addr}"),
            bucket,
        }
    }

    /// The endpoint to configure the client with (`http://127.0.0.1:PORT`).
    pub fn endpoint(&self) -> String {
        self.endpoint.clone()
    }

    /// The bucket's name.
    pub fn bucket(&self) -> String {
        self.bucket.name.clone()
    }

    /// Every key stored, in order.
    pub fn keys(&self) -> Vec<String> {
        self.bucket.objects().keys().cloned().collect()
    }

    /// The bytes stored under `key`.
    pub fn object(&self, key: &str) -> Option<Vec<u8>> {
        self.bucket
            .objects()
            .get(key)
            .map(|object| object.bytes.to_vec())
    }

    /// Stores `bytes` under `key`, as a client's `PUT` would.
    pub fn put(&self, key: &str, bytes: &[u8]) {
        self.bucket
            .objects()
            .insert(key.to_owned(), new_object(Bytes::copy_from_slice(bytes)));
    }

    /// Moves the last-modified time of `key` `by` into the past.
    ///
    /// # Panics
    ///
    /// When `key` is not stored.
    pub fn age(&self, key: &str, by: Duration) {
        let mut objects = self.bucket.objects();
        let object = objects.get_mut(key).expect("the object to age");
        object.modified -= by;
    }

    /// Lists at most `size` keys a page (S3 lists 1000).
    pub fn set_page_size(&self, size: usize) {
        *self
            .bucket
            .page_size
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = size.max(1);
    }

    /// Every request so far, as `METHOD /path?query`.
    pub fn requests(&self) -> Vec<String> {
        self.bucket
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many requests were refused for a missing or foreign
    /// `Authorization` header.
    pub fn unauthorized(&self) -> usize {
        *self
            .bucket
            .unauthorized
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

fn new_object(bytes: Bytes) -> Object {
    let mut hasher = DefaultHasher::new();
    bytes.hash(&mut hasher);
    Object {
        etag: format!("\"{:016x}\"", hasher.finish()),
        bytes,
        // S3 keeps whole seconds.
        modified: whole_seconds(SystemTime::now()),
    }
}

fn whole_seconds(time: SystemTime) -> SystemTime {
    let since = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    SystemTime::UNIX_EPOCH + Duration::from_secs(since.as_secs())
}

fn error(status: StatusCode, code: &str) -> Response {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>\
         <Message>{code}</Message></Error>"
    );
    (status, [(header::CONTENT_TYPE, "application/xml")], body).into_response()
}

/// Records the request; refuses it when it is not signed with
/// [`ACCESS_KEY_ID`] or names another bucket.
fn admit(
    bucket: &Bucket,
    name: &str,
    method: &Method,
    path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Result<(), Box<Response>> {
    let line = match query {
        Some(query) => format!("{method} {path}?{query}"),
        None => format!("{method} {path}"),
    };
    bucket
        .requests
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(line);
    let signed = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| {
            value.starts_with(&format!("AWS4-HMAC-SHA256 Credential={ACCESS_KEY_ID}/"))
        });
    if !signed {
        *bucket
            .unauthorized
            .lock()
            .unwrap_or_else(PoisonError::into_inner) += 1;
        return Err(Box::new(error(StatusCode::FORBIDDEN, "AccessDenied")));
    }
    if name != bucket.name {
        return Err(Box::new(error(StatusCode::NOT_FOUND, "NoSuchBucket")));
    }
    Ok(())
}

fn param<'a>(query: &'a [(String, String)], name: &str) -> Option<&'a str> {
    query
        .iter()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.as_str())
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

async fn list(
    State(bucket): State<Arc<Bucket>>,
    Path(name): Path<String>,
    method: Method,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let path = format!("/{name}");
    if let Err(refused) = admit(&bucket, &name, &method, &path, query.as_deref(), &headers) {
        return *refused;
    }
    let pairs: Vec<(String, String)> =
        url::form_urlencoded::parse(query.as_deref().unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    if method != Method::GET || param(&pairs, "list-type") != Some("2") {
        return error(StatusCode::NOT_IMPLEMENTED, "NotImplemented");
    }
    let prefix = param(&pairs, "prefix").unwrap_or_default();
    let after = param(&pairs, "continuation-token")
        .or_else(|| param(&pairs, "start-after"))
        .unwrap_or_default();
    let page = *bucket
        .page_size
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let max_keys = param(&pairs, "max-keys")
        .and_then(|keys| keys.parse::<usize>().ok())
        .map_or(page, |keys| keys.min(page));
    let objects = bucket.objects();
    let mut matching = objects
        .iter()
        .filter(|(key, _)| key.starts_with(prefix) && key.as_str() > after);
    let shown: Vec<(&String, &Object)> = matching.by_ref().take(max_keys).collect();
    let truncated = matching.next().is_some();
    let mut body = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">",
    );
    body.push_str(&format!(
        "<Name>{}</Name><Prefix>{}</Prefix><KeyCount>{}</KeyCount>\
         <MaxKeys>{max_keys}</MaxKeys><IsTruncated>{truncated}</IsTruncated>",
        escape(&bucket.name),
        escape(prefix),
        shown.len()
    ));
    for (key, object) in &shown {
        body.push_str(&format!(
            "<Contents><Key>{}</Key><LastModified>{}</LastModified>\
             <ETag>{}</ETag><Size>{}</Size><StorageClass>STANDARD</StorageClass></Contents>",
            escape(key),
            humantime::format_rfc3339_millis(object.modified),
            escape(&object.etag),
            object.bytes.len()
        ));
    }
    if truncated && let Some((last, _)) = shown.last() {
        body.push_str(&format!(
            "<NextContinuationToken>{}</NextContinuationToken>",
            escape(last)
        ));
    }
    body.push_str("</ListBucketResult>");
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/xml")],
        body,
    )
        .into_response()
}

async fn object(
    State(bucket): State<Arc<Bucket>>,
    Path((name, key)): Path<(String, String)>,
    method: Method,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = format!("/{name}/{key}");
    if let Err(refused) = admit(&bucket, &name, &method, &path, query.as_deref(), &headers) {
        return *refused;
    }
    match method {
        Method::PUT => {
            let mut objects = bucket.objects();
            let only_new = headers
                .get(header::IF_NONE_MATCH)
                .is_some_and(|value| value.as_bytes() == b"*");
            if only_new && objects.contains_key(&key) {
                return error(StatusCode::PRECONDITION_FAILED, "PreconditionFailed");
            }
            let object = new_object(body);
            let etag = object.etag.clone();
            objects.insert(key, object);
            (StatusCode::OK, [(header::ETAG, etag)]).into_response()
        }
        Method::GET | Method::HEAD => {
            let Some(object) = bucket.objects().get(&key).cloned() else {
                return error(StatusCode::NOT_FOUND, "NoSuchKey");
            };
            let headers = [
                (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
                (header::CONTENT_LENGTH, object.bytes.len().to_string()),
                (header::ETAG, object.etag.clone()),
                (
                    header::LAST_MODIFIED,
                    httpdate::fmt_http_date(object.modified),
                ),
            ];
            if method == Method::HEAD {
                (StatusCode::OK, headers).into_response()
            } else {
                (StatusCode::OK, headers, object.bytes).into_response()
            }
        }
        Method::DELETE => {
            bucket.objects().remove(&key);
            StatusCode::NO_CONTENT.into_response()
        }
        _ => error(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed"),
    }
}
