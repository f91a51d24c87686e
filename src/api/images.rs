//! The `image_url` content parts of a request's new user message, taken in
//! as attachments before anything is stored: a `data:` URL is decoded, an
//! `http(s)` URL fetched under the `http_get` tool's URL rules
//! (`tools.http_get`: schemes, host allow and deny lists, no private,
//! loopback or link-local address, checked again on every redirect and
//! resolved address; its redirect limit and timeout), both capped at
//! `media.max_file_bytes` and checked to be a PNG, JPEG, GIF or WebP by
//! their bytes. Any part that fails is a 400 naming it, and the request
//! stores nothing. The bytes then go through the media service like a
//! platform's photo (one blob per image, referenced by hash); neither the
//! URL nor the data is kept.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use switchboard_contract::{
    Attachment, AttachmentKind, FetchError, FetchMedia, MediaFetcher, collect_capped,
};
use url::Url;

use super::ApiError;
use crate::media::sniff_image;
use crate::tools::http_get::{HttpGetConfig, failure_text, guarded_client, refusal_of};

/// One `image_url` part of the new user message: where it is in the
/// request (for errors) and its URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImagePart {
    /// `messages[3].content[1]`.
    pub place: String,
    pub url: String,
}

/// Fetches and checks images for the API.
pub struct ImageFetcher {
    client: reqwest::Client,
    rules: HttpGetConfig,
    max_bytes: u64,
}

impl ImageFetcher {
    /// A fetcher under `rules` (the `http_get` tool's), taking images of
    /// at most `max_bytes`.
    ///
    /// # Errors
    /// The HTTP client cannot be built.
    pub fn new(rules: &HttpGetConfig, max_bytes: u64) -> Result<Self, reqwest::Error> {
        Ok(Self {
            client: guarded_client(
                rules,
                concat!("switchboard-image-fetch/", env!("CARGO_PKG_VERSION")),
            )?,
            rules: rules.clone(),
            max_bytes,
        })
    }

    /// Each of `parts` as an attachment holding its checked bytes, in
    /// order.
    ///
    /// # Errors
    /// The first part that cannot be taken, as a 400 naming it.
    pub async fn take(&self, parts: &[ImagePart]) -> Result<Vec<Attachment>, ApiError> {
        let mut attachments = Vec::with_capacity(parts.len());
        for part in parts {
            let bad =
                |why: String| ApiError::BadRequest(format!("{}: image_url {why}", part.place));
            let bytes = self.bytes_of(&part.url).await.map_err(bad)?;
            let media_type = sniff_image(&bytes)
                .ok_or_else(|| bad("is not a PNG, JPEG, GIF or WebP image".to_owned()))?;
            attachments.push(Attachment {
                media_type: Some(media_type.to_owned()),
                size: Some(bytes.len() as u64),
                fetch: Some(MediaFetcher::new(Held(bytes))),
                ..Attachment::new(AttachmentKind::Image, None)
            });
        }
        Ok(attachments)
    }

    /// The bytes `url` stands for; the reason, when it cannot be had.
    async fn bytes_of(&self, url: &str) -> Result<Vec<u8>, String> {
        let url = url.trim();
        if let Some(data) = url.strip_prefix("data:") {
            return self.decode(data);
        }
        let parsed = Url::parse(url).map_err(|err| format!("is not a valid URL: {err}"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err("must be a data: URL or an http(s) URL".to_owned());
        }
        if let Some(refusal) = refusal_of(&parsed, &self.rules) {
            return Err(format!("cannot be fetched: {refusal}"));
        }
        let response = self.client.get(parsed).send().await.map_err(|err| {
            format!(
                "could not be fetched: {}",
                failure_text(&err, self.rules.timeout())
            )
        })?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!(
                "could not be fetched: the server answered {status}"
            ));
        }
        let declared = response.content_length();
        collect_capped(response.bytes_stream(), declared, self.max_bytes, |err| {
            failure_text(&err, self.rules.timeout())
        })
        .await
        .map_err(|err| match err {
            FetchError::TooLarge { .. } => self.too_large(),
            FetchError::Failed(why) => format!("could not be fetched: {why}"),
        })
    }

    /// The bytes of a data URL after `data:`: `<type>;base64,<data>`.
    fn decode(&self, data: &str) -> Result<Vec<u8>, String> {
        let (header, payload) = data
            .split_once(',')
            .ok_or_else(|| "is a data: URL without a comma before its data".to_owned())?;
        if !header.ends_with(";base64") {
            return Err("is a data: URL that is not base64 (`data:image/png;base64,…`)".to_owned());
        }
        // Four base64 characters hold three bytes.
        if (payload.len() as u64 / 4).saturating_mul(3) > self.max_bytes.saturating_add(3) {
            return Err(self.too_large());
        }
        let bytes = BASE64
            .decode(payload.trim())
            .map_err(|err| format!("is a data: URL whose base64 does not decode: {err}"))?;
        if bytes.len() as u64 > self.max_bytes {
            return Err(self.too_large());
        }
        Ok(bytes)
    }

    fn too_large(&self) -> String {
        format!(
            "is too large: images can be at most {} bytes (media.max_file_bytes)",
            self.max_bytes
        )
    }
}

/// Bytes already fetched and checked, handed to the media service.
struct Held(Vec<u8>);

#[async_trait::async_trait]
impl FetchMedia for Held {
    async fn fetch(&self, max_bytes: u64) -> Result<Vec<u8>, FetchError> {
        if self.0.len() as u64 > max_bytes {
            return Err(FetchError::TooLarge {
                size: self.0.len() as u64,
                limit: max_bytes,
            });
        }
        Ok(self.0.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fetcher(max_bytes: u64) -> ImageFetcher {
        ImageFetcher::new(&HttpGetConfig::default(), max_bytes).expect("client")
    }

    fn part(url: &str) -> ImagePart {
        ImagePart {
            place: "messages[0].content[1]".to_owned(),
            url: url.to_owned(),
        }
    }

    fn refused(result: Result<Vec<Attachment>, ApiError>) -> String {
        match result {
            Err(ApiError::BadRequest(message)) => message,
            other => panic!("not a 400: {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_data_url_image_is_taken_with_its_type_read_off_the_bytes() {
        let png = crate::media::TINY_PNG;
        let url = format!("data:image/jpeg;base64,{}", BASE64.encode(png));
        let taken = fetcher(1024).take(&[part(&url)]).await.expect("taken");
        assert_eq!(taken[0].media_type.as_deref(), Some("image/png"));
        assert_eq!(taken[0].url, None, "the URL is not kept");
        let fetched = taken[0]
            .fetch
            .as_ref()
            .expect("bytes")
            .fetch(1024)
            .await
            .expect("fetch");
        assert_eq!(fetched, png);
    }

    #[tokio::test]
    async fn bad_parts_are_refused_naming_the_part() {
        let small = fetcher(16);
        let png = BASE64.encode(crate::media::TINY_PNG);
        let cases = [
            (format!("data:image/png;base64,{png}"), "too large"),
            ("data:image/png;base64,@@@@".to_owned(), "does not decode"),
            ("data:image/png,rawbytes".to_owned(), "not base64"),
            ("data:image/png;base64".to_owned(), "without a comma"),
            (
                format!("data:text/plain;base64,{}", BASE64.encode("hi")),
                "not a PNG",
            ),
            ("ftp://example.com/a.png".to_owned(), "http(s)"),
            ("not a url".to_owned(), "not a valid URL"),
            ("http://127.0.0.1:9/a.png".to_owned(), "non-public"),
            ("http://[::1]/a.png".to_owned(), "non-public"),
        ];
        for (url, expected) in cases {
            let message = refused(small.take(&[part(&url)]).await);
            assert!(
                message.starts_with("messages[0].content[1]: image_url ")
                    && message.contains(expected),
                "{url}: {message}"
            );
        }
    }

    /// Serves `body` once per connection on 127.0.0.1, with or without a
    /// `Content-Length` header; returns its URL.
    async fn serve(body: Vec<u8>, with_length: bool) -> String {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut request = [0_u8; 2048];
                let _ = socket.read(&mut request).await;
                let length = if with_length {
                    format!("Content-Length: {}\r\n", body.len())
                } else {
                    String::new()
                };
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\n{length}Connection: close\r\n\r\n"
                );
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(&body).await;
            }
        });
        format!("http://{address}/image.png")
    }

    #[tokio::test]
    async fn an_http_image_over_the_cap_is_refused_whether_or_not_its_size_is_announced() {
        let rules = HttpGetConfig {
            allow_private: true,
            ..HttpGetConfig::default()
        };
        let png = crate::media::TINY_PNG.to_vec();
        let cap = png.len() as u64 - 1;
        let small = ImageFetcher::new(&rules, cap).expect("client");
        for with_length in [true, false] {
            let url = serve(png.clone(), with_length).await;
            let message = refused(small.take(&[part(&url)]).await);
            assert!(
                message.contains("is too large") && message.contains(&cap.to_string()),
                "{message}"
            );
            let fits = ImageFetcher::new(&rules, 1024).expect("client");
            let taken = fits.take(&[part(&url)]).await.expect("taken");
            assert_eq!(taken[0].media_type.as_deref(), Some("image/png"));
        }
    }
}
