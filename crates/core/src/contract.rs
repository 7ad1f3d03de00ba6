//! The contract profile: what differs between the RivetKit versions whose
//! runtime we stand in for, kept in this one place (docs/versions.md).
//!
//! RivetKit tells the addon its own version in `serve()`'s config
//! (`serverlessPackageVersion`, sent by 2.3.19 and 3.0.0 alike). Everything
//! that behaves differently per version asks the [`RivetkitVersion`] held by
//! the serve run, never the version string.
//!
//! | item | 2.3 | 3.0 (and direct use) |
//! |---|---|---|
//! | engine architecture by default | v2 (engine 2.3.x) | v3 (engine 3.0.x) |

/// The RivetKit generation whose addon contract a serve run follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RivetkitVersion {
    /// `rivetkit@2.3.x` on `@rivetkit/rivetkit-napi@2.3.x`.
    V2_3,
    /// `rivetkit@3.0.x` on `@rivetkit/rivetkit-napi@3.0.x`, and direct use
    /// of this addon without RivetKit.
    #[default]
    V3_0,
}

impl RivetkitVersion {
    /// The profile for the version RivetKit reports. A 2.x version is 2.3;
    /// anything else (3.x, a later or unparsable version, or none: direct
    /// use) is the newest contract we offer.
    pub fn from_package_version(version: Option<&str>) -> Self {
        let major = version.and_then(|v| v.trim().trim_start_matches('v').split('.').next()?.parse::<u64>().ok());
        match major {
            Some(2) => Self::V2_3,
            _ => Self::V3_0,
        }
    }

    /// How the version is named in logs and errors.
    pub fn label(self) -> &'static str {
        match self {
            Self::V2_3 => "rivetkit 2.3",
            Self::V3_0 => "rivetkit 3.0",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_string_picks_the_profile() {
        assert_eq!(RivetkitVersion::from_package_version(Some("2.3.19")), RivetkitVersion::V2_3);
        assert_eq!(RivetkitVersion::from_package_version(Some("2.3.24-rc.1")), RivetkitVersion::V2_3);
        assert_eq!(RivetkitVersion::from_package_version(Some("3.0.0")), RivetkitVersion::V3_0);
        assert_eq!(RivetkitVersion::from_package_version(Some("0.1.0")), RivetkitVersion::V3_0);
        assert_eq!(RivetkitVersion::from_package_version(Some("nonsense")), RivetkitVersion::V3_0);
        assert_eq!(RivetkitVersion::from_package_version(None), RivetkitVersion::V3_0);
    }
}
