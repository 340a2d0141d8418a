//! The ClueCDC config provider jar this server hands out (`--provider-jar`), so that a Connect
//! worker anywhere gets the provider that goes with this server in one step: a `curl` into its
//! plugin path, or a Strimzi `KafkaConnect` `build.plugins` artifact, each checked by the jar's
//! SHA-512.
//!
//! Invariant: what is served is the file as it was when the server started, and the checksum
//! served beside it is that content's; a file that is not the provider's jar stops the start.

use std::path::Path;

use anyhow::{bail, Context};
use sha2::{Digest, Sha512};

/// The name it is served under, whatever the file's own name (`…-0.1.0.jar`).
pub const FILE_NAME: &str = "cluecdc-config-provider.jar";
/// Where it is served: among the static assets, which API.md leaves public, because workers
/// and image builds (a Strimzi `build.plugins` artifact) fetch it without signing in.
pub const URL_PATH: &str = "/static/cluecdc-config-provider.jar";
/// Its checksum, as `sha512sum` prints it.
pub const SHA512_URL_PATH: &str = "/static/cluecdc-config-provider.jar.sha512";

/// The provider's class: a jar must hold it (zip entry names are stored as written).
const CLASS_ENTRY: &str = "io/cluecdc/connect/ClueCdcConfigProvider.class";

pub struct ProviderJar {
    pub bytes: Vec<u8>,
    /// Lower-case hex.
    pub sha512: String,
}

impl ProviderJar {
    /// Reads and checks the jar; the errors name the setting and say what to give it.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let bytes = std::fs::read(path).with_context(|| {
            format!(
                "--provider-jar {}: cannot read it; give the path of cluecdc-config-provider-*.jar (built by `mvn -f connect-image/config-provider/pom.xml package`)",
                path.display()
            )
        })?;
        Self::from_bytes(bytes).with_context(|| format!("--provider-jar {}", path.display()))
    }

    fn from_bytes(bytes: Vec<u8>) -> anyhow::Result<Self> {
        if !bytes.starts_with(b"PK\x03\x04") {
            bail!("not a jar (a jar is a zip file); give cluecdc-config-provider-*.jar");
        }
        if !bytes
            .windows(CLASS_ENTRY.len())
            .any(|w| w == CLASS_ENTRY.as_bytes())
        {
            bail!("this jar has no {CLASS_ENTRY}: it is not the ClueCDC config provider");
        }
        let sha512 = hex::encode(Sha512::digest(&bytes));
        Ok(ProviderJar { bytes, sha512 })
    }

    /// The checksum file's text, which `sha512sum -c` reads.
    pub fn checksum_line(&self) -> String {
        format!("{}  {FILE_NAME}\n", self.sha512)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_zip_holding_the_provider_class_is_served_and_its_checksum_is_sha512sums() {
        let err = ProviderJar::from_bytes(b"hello".to_vec()).err().unwrap();
        assert!(err.to_string().contains("not a jar"), "{err}");
        let other = b"PK\x03\x04....org/example/Other.class".to_vec();
        let err = ProviderJar::from_bytes(other).err().unwrap();
        assert!(
            err.to_string().contains("not the ClueCDC config provider"),
            "{err}"
        );
        let jar = ProviderJar::from_bytes(format!("PK\x03\x04....{CLASS_ENTRY}....").into_bytes())
            .unwrap();
        assert_eq!(jar.sha512.len(), 128);
        assert_eq!(
            jar.checksum_line(),
            format!("{}  cluecdc-config-provider.jar\n", jar.sha512)
        );
    }
}
