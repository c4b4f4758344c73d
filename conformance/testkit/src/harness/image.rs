//! The server image: found, or built by `conformance/image/build.sh`.

use std::time::Instant;

use tokio::sync::Mutex;

use super::docker;
use super::error::{HarnessError, Result};

/// The image version the harness needs; bumped whenever its contents change.
const VERSION: &str = include_str!("../../../image/VERSION");
const BUILD_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../image/build.sh");

/// Serializes builders within this process; `build.sh` itself holds a file
/// lock (`flock` on `$TENURE_IMAGE_CACHE/build.lock`), which serializes test
/// binaries running in parallel: the second waits, then finds the image.
static ENSURED: Mutex<Option<Image>> = Mutex::const_new(None);

/// The image with etcd, ZooKeeper and Redis that every node runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    name: String,
}

impl Image {
    /// The tag the harness uses: `tenure-conformance/servers:<VERSION>`.
    pub fn name_for_this_version() -> String {
        format!("tenure-conformance/servers:{}", VERSION.trim())
    }

    /// Finds the image, or builds it when missing (about a minute with a
    /// reachable Debian mirror; seconds when only re-importing the cached rootfs).
    pub async fn ensure() -> Result<Image> {
        let mut ensured = ENSURED.lock().await;
        if let Some(image) = ensured.as_ref() {
            return Ok(image.clone());
        }
        let name = Self::name_for_this_version();
        let docker = docker::connect().await?;
        if docker.inspect_image(&name).await.is_err() {
            let started = Instant::now();
            tracing::info!(image = %name, "image missing; running {BUILD_SCRIPT}");
            let output = tokio::process::Command::new("bash")
                .arg(BUILD_SCRIPT)
                .output()
                .await?;
            if !output.status.success() {
                let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
                text.push_str(&String::from_utf8_lossy(&output.stderr));
                let tail: Vec<&str> = text.lines().rev().take(40).collect();
                return Err(HarnessError::Build {
                    status: output.status.to_string(),
                    output: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
                });
            }
            docker.inspect_image(&name).await?;
            tracing::info!(image = %name, elapsed = ?started.elapsed(), "image built");
        }
        let image = Image { name };
        *ensured = Some(image.clone());
        Ok(image)
    }

    /// The image reference, `tenure-conformance/servers:<VERSION>`.
    pub fn name(&self) -> &str {
        &self.name
    }
}
