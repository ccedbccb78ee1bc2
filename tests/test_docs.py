"""The README is a front page (<= 20 kB) whose links, and the links of docs/ and benchmarks/README.md, reach a file
and a heading that exist; its test command is the one CI runs."""
import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md", os.path.join("benchmarks", "README.md")] + sorted(
    os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _outside_code(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _anchors(path: str):
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes, repeats numbered."""
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#+ (.+)$", _outside_code(open(path, encoding="utf-8").read()), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        seen[slug] = seen.get(slug, -1) + 1
        yield slug if not seen[slug] else f"{slug}-{seen[slug]}"


def test_every_link_reaches_a_file_and_heading():
    broken = []
    for page in PAGES:
        text = _outside_code(open(os.path.join(ROOT, page), encoding="utf-8").read())
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue  # a web address
            file, _, anchor = target.partition("#")
            path = (os.path.normpath(os.path.join(ROOT, os.path.dirname(page), file)) if file
                    else os.path.join(ROOT, page))
            if not os.path.exists(path):
                broken.append(f"{page}: {target} (no such file)")
            elif anchor and anchor not in set(_anchors(path)):
                broken.append(f"{page}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_readme_is_a_front_page_with_the_ci_test_command():
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert len(readme.encode()) <= 20_000
    for link in ("docs/zh/quickstart.md", "docs/reference.md", "docs/config.md"):
        assert f"]({link})" in readme
    ci_command = [line for line in open(os.path.join(ROOT, ".ci", "run")) if line.startswith("python -m pytest")]
    test_section = readme.split("\n## Test\n", 1)[1]
    assert ci_command and f"```bash\n{ci_command[0].strip()}\n```" in test_section
