//! Where sparkctl finds what the user writes (recipes, suites, jobs, the image lock): the
//! directory given, else `./recipes` when run inside a checkout, else the user's config dir.

use std::path::{Path, PathBuf};

/// `$XDG_CONFIG_HOME/sparkctl`, else `~/.config/sparkctl`.
pub fn config_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into());
            PathBuf::from(home).join(".config")
        });
    base.join("sparkctl")
}

/// Where recipes are, and whether the user said so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecipesDir {
    pub path: PathBuf,
    /// Named by `--recipes` or `SPARKCTL_RECIPES`: it must exist.
    pub given: bool,
}

impl RecipesDir {
    /// `given`, else `./recipes` if it is a directory, else `config_dir()/recipes`.
    pub fn find(given: Option<&Path>) -> RecipesDir {
        if let Some(path) = given {
            return RecipesDir {
                path: path.to_path_buf(),
                given: true,
            };
        }
        let here = PathBuf::from("recipes");
        let path = if here.is_dir() {
            here
        } else {
            config_dir().join("recipes")
        };
        RecipesDir { path, given: false }
    }

    /// Found by looking, and nothing is there: commands that need no recipe (`bench URL`,
    /// `status`) go on with none.
    pub fn absent(&self) -> bool {
        !self.given && !self.path.is_dir()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_dir_is_taken_as_it_is_even_when_missing() {
        let d = RecipesDir::find(Some(Path::new("/nonexistent/recipes")));
        assert!(d.given);
        assert!(
            !d.absent(),
            "a missing given dir is an error later, not an empty set"
        );
    }
}
