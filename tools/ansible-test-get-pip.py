"""Stand-in for the pip bootstrap script ansible-test downloads (get-pip-<version>.py).

ansible-test creates a venv without pip for some sanity tests, then runs this script with
pip's install options and the packages to install (pip==<version>). The original comes from a
host this network cannot reach; this one gives the venv the pip that ships with Python
(ensurepip), then lets that pip install what ansible-test asked for from the package index.
tools/sanity.sh puts it where ansible-test looks: ~/.ansible/test/cache/get_pip_<version>.py.
"""

import subprocess
import sys

GET_PIP_ONLY = ("--no-setuptools", "--no-wheel")

args = [arg for arg in sys.argv[1:] if arg not in GET_PIP_ONLY]
subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"], stdout=subprocess.DEVNULL)
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install"] + args))
