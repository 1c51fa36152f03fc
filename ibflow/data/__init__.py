"""Data sets: synthetic generators and loaders for local files (nothing is downloaded).

Layer 5 (tasks, see `docs/architecture.md`): a synthetic set may label by a teacher model, so
data sits above the models; only orchestration (sweeps, reproductions, the CLI) imports it."""

from ._regression import RegressionData as RegressionData, sparse_regression as sparse_regression

# -- classification data --
from ._cifar import CIFAR10_MD5 as CIFAR10_MD5, load_cifar10 as load_cifar10  # noqa: E402
from ._digits import digits as digits  # noqa: E402
from ._mixture import (  # noqa: E402
    ClassificationData as ClassificationData,
    binary_task as binary_task,
    gaussian_mixture as gaussian_mixture,
    near_orthogonality as near_orthogonality,
)
from ._mnist import MNIST_MD5 as MNIST_MD5, load_mnist as load_mnist, read_idx as read_idx  # noqa: E402
from ._files import DataFileError as DataFileError  # noqa: E402
from ._teacher import TeacherStudentData as TeacherStudentData, teacher_student as teacher_student  # noqa: E402
