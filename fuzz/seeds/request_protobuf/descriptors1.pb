
bench


userv1