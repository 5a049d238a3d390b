package sim

import apierrors "k8s.io/apimachinery/pkg/api/errors"

func isAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }
