//! Static assets (htmx, the stylesheet) compiled into the binary.
//!
//! `debug-embed` makes debug builds embed too, so no build reads the source tree at run time.

use rust_embed::RustEmbed;

#[derive(RustEmbed)]
#[folder = "static/"]
#[exclude = "*.md"]
pub struct Static;
