import os


def list_python_files(root):
    """Return the paths of the Python files below root."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            if name.endswith(".py"):
                found.append(os.path.join(dirpath, name))
    return found


def count_lines(path):
    with open(path, encoding="utf-8") as f:
        return len(f.
