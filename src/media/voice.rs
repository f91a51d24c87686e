//! Voice notes and audio files to text: the audio is sent to an
//! OpenAI-compatible `POST {base_url}/audio/transcriptions` (multipart:
//! `file`, `model`, optional `language`; OpenAI's own, or a local whisper
//! server that speaks the same API), once, when its turn starts (the audio
//! is stored on arrival). The transcript is kept with the
//! [`MediaRef`](super::MediaRef), in the stored user message, and reaches the model as
//! the user's text after a marker (`[voice note, transcribed] …`); the audio
//! itself stays stored as a blob.
//!
//! The audio's type is read off its bytes (Ogg, WAV, MP3, MP4/M4A, WebM,
//! FLAC: the containers the API takes); the file is sent under a name with
//! the matching extension, which is how the API tells formats apart. The
//! key is read from the environment variable `api_key_env` names (no
//! `Authorization` header when it is unset or empty, as a local server
//! needs none); errors name neither the key nor the URL.

use std::time::Duration;

use schemars::JsonSchema;
use secrecy::{ExposeSecret as _, SecretString};
use serde::Deserialize;

use crate::domain::setting::{self, BaseUrl, InvalidSetting};

/// `[media.transcription]`: where voice notes are transcribed. Without the
/// section, voice notes and audio files are answered that voice notes are
/// not enabled.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TranscriptionSettings {
    /// The API base, up to and including `/v1`: the request goes to
    /// `{base_url}/audio/transcriptions`.
    pub base_url: BaseUrl,
    /// The transcription model (`whisper-1`, `gpt-4o-mini-transcribe`, or
    /// what a local server calls its model).
    pub model: String,
    /// Name of the environment variable holding the API key (none sent
    /// when it is unset or empty).
    pub api_key_env: String,
    /// The language spoken, as an ISO-639-1 code (`en`); unset lets the
    /// model detect it.
    pub language: Option<String>,
    /// Bound on one transcription request (`timeout_secs`, at least 1).
    #[serde(
        rename = "timeout_secs",
        deserialize_with = "setting::secs::deserialize"
    )]
    #[schemars(with = "u64")]
    pub timeout: Duration,
}

impl Default for TranscriptionSettings {
    fn default() -> Self {
        Self {
            base_url: BaseUrl::parse("https://api.openai.com/v1").expect("a valid URL"),
            model: "whisper-1".to_owned(),
            api_key_env: "OPENAI_API_KEY".to_owned(),
            language: None,
            timeout: Duration::from_secs(60),
        }
    }
}

impl TranscriptionSettings {
    /// Checks what parses but cannot be used.
    ///
    /// # Errors
    /// An empty model, or a timeout under a second.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if self.model.trim().is_empty() {
            return Err(InvalidSetting::new(
                "media.transcription.model",
                "must not be empty",
            ));
        }
        if self.timeout < Duration::from_secs(1) {
            return Err(InvalidSetting::new(
                "media.transcription.timeout_secs",
                "must be at least 1",
            ));
        }
        Ok(())
    }
}

/// Why a transcription gave no text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TranscribeError {
    /// The server could not be reached, failed or answered something else
    /// than a transcript. The text names no URL and no key.
    #[error("the transcription failed: {0}")]
    Failed(String),
    /// The server heard no speech.
    #[error("no speech was recognised")]
    NoSpeech,
}

/// The client of the transcription endpoint.
pub struct Transcriber {
    client: reqwest::Client,
    url: String,
    model: String,
    language: Option<String>,
    key: SecretString,
}

impl std::fmt::Debug for Transcriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transcriber")
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl Transcriber {
    /// The client of `settings`, with the key read from the environment.
    ///
    /// # Errors
    /// The HTTP client cannot be built.
    pub fn new(settings: &TranscriptionSettings) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .user_agent(concat!("switchboard/", env!("CARGO_PKG_VERSION")))
            .timeout(settings.timeout)
            .build()?;
        let key = std::env::var(&settings.api_key_env).unwrap_or_default();
        Ok(Self {
            client,
            url: format!("{}/audio/transcriptions", settings.base_url),
            model: settings.model.clone(),
            language: settings.language.clone().filter(|code| !code.is_empty()),
            key: SecretString::from(key),
        })
    }

    /// The text spoken in `audio`, of the type `media_type` (see
    /// [`sniff_audio`]), trimmed.
    ///
    /// # Errors
    /// The request failed or was refused, the answer holds no `text`, or
    /// the text is empty.
    pub async fn transcribe(
        &self,
        audio: Vec<u8>,
        media_type: &str,
    ) -> Result<String, TranscribeError> {
        let extension = extension_of(media_type);
        let file = reqwest::multipart::Part::bytes(audio)
            .file_name(format!("audio.{extension}"))
            .mime_str(media_type)
            .map_err(|err| TranscribeError::Failed(err.without_url().to_string()))?;
        let mut form = reqwest::multipart::Form::new()
            .part("file", file)
            .text("model", self.model.clone())
            .text("response_format", "json");
        if let Some(language) = &self.language {
            form = form.text("language", language.clone());
        }
        let mut request = self.client.post(&self.url).multipart(form);
        let key = self.key.expose_secret();
        if !key.is_empty() {
            request = request.bearer_auth(key);
        }
        let failed = |err: reqwest::Error| {
            let what = if err.is_timeout() {
                "the transcription server did not answer in time".to_owned()
            } else if err.is_connect() {
                "could not connect to the transcription server".to_owned()
            } else {
                err.without_url().to_string()
            };
            TranscribeError::Failed(what)
        };
        let response = request.send().await.map_err(failed)?;
        let status = response.status();
        if !status.is_success() {
            return Err(TranscribeError::Failed(format!(
                "the transcription server answered {status}"
            )));
        }
        #[derive(Deserialize)]
        struct Answer {
            text: String,
        }
        let answer: Answer = response.json().await.map_err(|err| {
            TranscribeError::Failed(format!(
                "the transcription server's answer is not a transcript: {}",
                err.without_url()
            ))
        })?;
        let text = answer.text.trim();
        if text.is_empty() {
            return Err(TranscribeError::NoSpeech);
        }
        Ok(text.to_owned())
    }
}

/// The audio type of `bytes`, read off their signature: the containers
/// the transcription API takes.
#[must_use]
pub fn sniff_audio(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"OggS") {
        Some("audio/ogg")
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WAVE" {
        Some("audio/wav")
    } else if bytes.starts_with(b"ID3")
        || (bytes.len() >= 2 && bytes[0] == 0xFF && bytes[1] & 0xE0 == 0xE0 && bytes[1] != 0xFF)
    {
        Some("audio/mpeg")
    } else if bytes.len() >= 8 && &bytes[4..8] == b"ftyp" {
        Some("audio/mp4")
    } else if bytes.starts_with(&[0x1A, 0x45, 0xDF, 0xA3]) {
        Some("audio/webm")
    } else if bytes.starts_with(b"fLaC") {
        Some("audio/flac")
    } else {
        None
    }
}

/// The file name extension the API knows `media_type` by.
fn extension_of(media_type: &str) -> &'static str {
    match media_type {
        "audio/ogg" => "ogg",
        "audio/wav" => "wav",
        "audio/mpeg" => "mp3",
        "audio/mp4" => "m4a",
        "audio/webm" => "webm",
        "audio/flac" => "flac",
        _ => "bin",
    }
}

#[cfg(test)]
mod tests {
    use switchboard_test_support::media::tone_wav;
    use switchboard_test_support::transcription::FakeTranscription;

    use super::*;

    fn settings(base_url: String) -> TranscriptionSettings {
        TranscriptionSettings {
            base_url: BaseUrl::parse(&base_url).expect("the fake's URL"),
            model: "whisper-test".to_owned(),
            api_key_env: "SWITCHBOARD_TEST_NO_SUCH_KEY".to_owned(),
            language: Some("en".to_owned()),
            ..TranscriptionSettings::default()
        }
    }

    #[tokio::test]
    async fn audio_is_sent_as_a_form_and_the_text_comes_back() {
        let server = FakeTranscription::start("  hello there \n").await;
        let transcriber = Transcriber::new(&settings(server.base_url())).expect("client");
        let wav = tone_wav(50);
        assert_eq!(sniff_audio(&wav), Some("audio/wav"));
        let text = transcriber
            .transcribe(wav.clone(), "audio/wav")
            .await
            .expect("text");
        assert_eq!(text, "hello there");
        let requests = server.requests();
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].file, wav);
        assert_eq!(requests[0].file_name.as_deref(), Some("audio.wav"));
        assert_eq!(requests[0].file_type.as_deref(), Some("audio/wav"));
        assert_eq!(requests[0].model.as_deref(), Some("whisper-test"));
        assert_eq!(requests[0].language.as_deref(), Some("en"));
        assert_eq!(requests[0].authorization, None, "no key, no header");
    }

    #[tokio::test]
    async fn failures_and_silence_are_errors_naming_no_url() {
        let server = FakeTranscription::start("").await;
        let transcriber = Transcriber::new(&settings(server.base_url())).expect("client");
        let wav = tone_wav(10);
        assert_eq!(
            transcriber.transcribe(wav.clone(), "audio/wav").await,
            Err(TranscribeError::NoSpeech)
        );
        server.fail_with(503);
        let Err(TranscribeError::Failed(reason)) =
            transcriber.transcribe(wav.clone(), "audio/wav").await
        else {
            panic!("a 503 is a failure")
        };
        assert!(reason.contains("503"), "{reason}");
        assert!(!reason.contains("127.0.0.1"), "{reason}");
        let gone = Transcriber::new(&settings("http://127.0.0.1:9/v1".to_owned())).expect("client");
        let Err(TranscribeError::Failed(reason)) = gone.transcribe(wav, "audio/wav").await else {
            panic!("nothing listens there")
        };
        assert!(!reason.contains("127.0.0.1"), "{reason}");
    }

    #[test]
    fn audio_types_are_read_off_the_bytes() {
        assert_eq!(sniff_audio(b"OggS\0\x02rest"), Some("audio/ogg"));
        assert_eq!(sniff_audio(b"ID3\x04rest"), Some("audio/mpeg"));
        assert_eq!(sniff_audio(&[0xFF, 0xFB, 0x90, 0x00]), Some("audio/mpeg"));
        assert_eq!(sniff_audio(b"\0\0\0\x20ftypM4A "), Some("audio/mp4"));
        assert_eq!(sniff_audio(b"fLaC\0"), Some("audio/flac"));
        assert_eq!(sniff_audio(&[0xFF, 0xD8, 0xFF, 0xE0]), None, "a JPEG");
        assert_eq!(sniff_audio(b"plain"), None);
    }
}
