//! The recipe file an import writes: what it came from, how it was read, what could not be
//! inferred and the model dir's suggested patches as comments, then the recipe as YAML.

use super::Draft;
use crate::error::{Error, Result};

/// One comment line per item; a line break inside an item stays inside the comment.
fn comment_items(out: &mut String, title: &str, items: &[String]) {
    if items.is_empty() {
        return;
    }
    out.push_str(&format!("# {title}\n"));
    for item in items {
        let one_line = item.split_whitespace().collect::<Vec<_>>().join(" ");
        out.push_str(&format!("#   - {one_line}\n"));
    }
}

pub(crate) fn file(draft: &Draft) -> Result<String> {
    let mut out = String::new();
    out.push_str(&format!(
        "# Written by `sparkctl import` on {}. Review it, then `sparkctl start {}` or `sparkctl \
         adopt {}`.\n",
        crate::units::now_utc(),
        draft.recipe.name,
        draft.recipe.name
    ));
    comment_items(&mut out, "How it was read:", &draft.notes);
    comment_items(
        &mut out,
        "NOT INFERRED - check these before serving:",
        &draft.unknown,
    );
    if !draft.suggested_patches.is_empty() {
        out.push_str(
            "# Suggested model-dir patches: the model dir's files show these mismatches. Uncomment\n\
             # the lines under `model:` to apply them at `up` (`sparkctl patch NAME --dry-run` shows\n\
             # the diff first):\n",
        );
        for s in &draft.suggested_patches {
            out.push_str(&format!(
                "#   {}\n",
                s.why.split_whitespace().collect::<Vec<_>>().join(" ")
            ));
        }
    }
    let body = serde_yaml_ng::to_string(&draft.recipe)
        .map_err(|e| Error::Failed(format!("the imported recipe does not serialize: {e}")))?;
    let mut in_model = false;
    for line in body.lines() {
        let top = !line.starts_with(' ');
        if in_model && top && !draft.suggested_patches.is_empty() {
            patches_block(&mut out, draft);
            in_model = false;
        }
        out.push_str(line);
        out.push('\n');
        if line == "model:" {
            in_model = true;
        }
    }
    if in_model && !draft.suggested_patches.is_empty() {
        patches_block(&mut out, draft);
    }
    // A value left out is nowhere in the file, whatever quoted it.
    Ok(draft.left_out.known(&out))
}

fn patches_block(out: &mut String, draft: &Draft) {
    out.push_str("  # patches:\n");
    for s in &draft.suggested_patches {
        out.push_str(&format!("  #   {}\n", s.step));
    }
}
