//! Serves the embedded static files with a content type, an ETag and revalidation.

use poem::http::{header, StatusCode};
use poem::web::Path;
use poem::{handler, Request, Response};

use crate::assets::Static;

#[handler]
pub async fn asset(Path(path): Path<String>, req: &Request) -> Response {
    let Some(file) = Static::get(&path) else {
        return Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body("not found");
    };
    let etag = format!("\"{}\"", hex::encode(&file.metadata.sha256_hash()[..12]));
    if req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        == Some(etag.as_str())
    {
        return Response::builder()
            .status(StatusCode::NOT_MODIFIED)
            .header(header::ETAG, etag)
            .finish();
    }
    let mime = mime_guess::from_path(&path).first_or_octet_stream();
    Response::builder()
        .header(header::CONTENT_TYPE, mime.essence_str())
        .header(header::ETAG, etag)
        // Assets change only with the binary; revalidation by ETag is cheap.
        .header(
            header::CACHE_CONTROL,
            "public, max-age=300, must-revalidate",
        )
        .body(file.data.into_owned())
}
