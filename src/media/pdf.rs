//! PDF documents to text: the text of a PDF's pages (`pdf-extract`, over
//! `lopdf`), extracted once when the file arrives and kept as a text blob of
//! its own that the [`MediaRef`](super::MediaRef) names as its
//! [`Derived`](super::Derived) version; models read it as they read a text
//! file. A PDF without extractable text (a scan) or that does not parse is
//! refused with a reply.

/// The signature every PDF starts with (after at most a few bytes of junk,
/// which the gateway does not accept).
const SIGNATURE: &[u8] = b"%PDF-";

/// Whether `bytes` are a PDF, by their signature.
#[must_use]
pub fn is_pdf(bytes: &[u8]) -> bool {
    bytes.starts_with(SIGNATURE)
}

/// Why a PDF gave no text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PdfError {
    /// It parsed, but holds no text (a scanned document, images only).
    #[error("the PDF has no text")]
    NoText,
    /// It does not parse (damaged, encrypted with a password, or not a
    /// PDF the extractor understands).
    #[error("the PDF could not be read: {0}")]
    Broken(String),
}

/// The text of the PDF `bytes`: its pages' text, trimmed, with runs of
/// blank lines folded to one. Runs on a blocking thread; a panic in the
/// extractor is a [`PdfError::Broken`].
///
/// # Errors
/// No text, or the PDF does not parse.
pub async fn extract_text(bytes: Vec<u8>) -> Result<String, PdfError> {
    let extracted = tokio::task::spawn_blocking(move || {
        std::panic::catch_unwind(|| pdf_extract::extract_text_from_mem(&bytes))
    })
    .await;
    let text = match extracted {
        Ok(Ok(Ok(text))) => text,
        Ok(Ok(Err(err))) => return Err(PdfError::Broken(err.to_string())),
        Ok(Err(_)) | Err(_) => {
            return Err(PdfError::Broken("the text extractor failed".to_owned()));
        }
    };
    let text = tidy(&text);
    if text.is_empty() {
        return Err(PdfError::NoText);
    }
    Ok(text)
}

/// `text` with trailing spaces cut from each line, at most one blank line
/// in a row, and no blank lines at either end.
fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = false;
    for line in text.lines().map(str::trim_end) {
        if line.trim().is_empty() {
            blank = !out.is_empty();
            continue;
        }
        if blank {
            out.push('\n');
            blank = false;
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use switchboard_test_support::media::test_pdf;

    use super::*;

    #[tokio::test]
    async fn the_text_of_a_pdf_is_extracted() {
        let pdf = test_pdf(&["Quarterly report", "Revenue rose 12 percent"]);
        assert!(is_pdf(&pdf));
        let text = extract_text(pdf).await.expect("text");
        assert!(text.contains("Quarterly report"), "{text:?}");
        assert!(text.contains("Revenue rose 12 percent"), "{text:?}");
    }

    #[tokio::test]
    async fn a_pdf_without_text_and_a_broken_one_are_errors() {
        let empty = test_pdf(&[]);
        assert_eq!(extract_text(empty).await, Err(PdfError::NoText));
        let mut broken = test_pdf(&["cut short"]);
        broken.truncate(40);
        assert!(matches!(
            extract_text(broken).await,
            Err(PdfError::Broken(_))
        ));
        assert!(!is_pdf(b"hello"));
    }

    #[test]
    fn blank_lines_are_folded() {
        assert_eq!(tidy("\n\n a  \n\n\n\nb\n\n"), " a\n\nb");
    }
}
