"""Stand-in for ansible-test's get-pip bootstrap script.

ansible-test downloads get-pip.py from ci-files.testing.ansible.com, which is
not reachable from CI or the lab. This does the same job with what every
CPython ships: ensurepip for a first pip, then pip itself (from the package
index, which is reachable) for the requested versions. Flags get-pip.py
understands but pip does not are dropped.
"""
import subprocess
import sys

GET_PIP_ONLY_FLAGS = {"--no-setuptools", "--no-wheel"}


def main(argv):
    subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"])
    args = [a for a in argv if a not in GET_PIP_ONLY_FLAGS]
    if args:
        subprocess.check_call([sys.executable, "-m", "pip", "install"] + args)


if __name__ == "__main__":
    main(sys.argv[1:])
