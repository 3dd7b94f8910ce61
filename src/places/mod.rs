//! Where sparkctl finds what the user writes (recipes, suites, jobs, the image lock): the
//! directory given, else `./recipes` when run inside a checkout, else the user's config dir.
//! Wherever the recipes dir is, the rest sits beside it as in a checkout: `recipes/suites/`,
//! `recipes/jobs/`, `patches/` and `images.lock` in its parent. `init` lays that out.

mod init;

use std::path::{Path, PathBuf};

pub(crate) use init::{init, FileOutcome};

/// `$XDG_CONFIG_HOME/sparkctl`, else `~/.config/sparkctl`.
pub(crate) fn config_dir() -> PathBuf {
    crate::settings::environment()
        .config_home()
        .join("sparkctl")
}

/// Where recipes are, and whether the user said so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecipesDir {
    pub(crate) path: PathBuf,
    /// Named by `--recipes` or `SPARKCTL_RECIPES`: it must exist.
    given: bool,
}

impl RecipesDir {
    /// `given`, else `./recipes` if it is a directory, else `config_dir()/recipes`.
    pub(crate) fn find(given: Option<&Path>) -> RecipesDir {
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
    pub(crate) fn absent(&self) -> bool {
        !self.given && !self.path.is_dir()
    }
}

/// The directory that holds a recipes dir and what sits beside it (`patches/`,
/// `images.lock`): the checkout's root, or the config dir. A bare `recipes` gives the empty
/// path, which joins as the current directory.
pub(crate) fn root_of(recipes_dir: &Path) -> PathBuf {
    recipes_dir
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// The image lock that goes with a recipes dir: `images.lock` beside it.
pub(crate) fn lock_path(recipes_dir: &Path) -> PathBuf {
    root_of(recipes_dir).join(crate::lock::LOCK_FILE)
}

/// Where a recipe file's `write-file` steps find `patches/…`: beside its recipes dir.
pub(crate) fn patches_root(recipe_file: &Path) -> PathBuf {
    root_of(recipe_file.parent().unwrap_or(Path::new("recipes")))
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

    #[test]
    fn the_lock_and_patches_sit_beside_the_recipes_dir() {
        let config = Path::new("/home/u/.config/sparkctl/recipes");
        assert_eq!(
            lock_path(config),
            Path::new("/home/u/.config/sparkctl/images.lock")
        );
        assert_eq!(
            patches_root(&config.join("qat-v2b.yaml")),
            Path::new("/home/u/.config/sparkctl")
        );
        // Inside a checkout: relative to where sparkctl runs.
        assert_eq!(lock_path(Path::new("recipes")), Path::new("images.lock"));
        assert_eq!(
            patches_root(Path::new("recipes/qat-v2b.yaml")).join("patches/x"),
            Path::new("patches/x")
        );
    }
}
